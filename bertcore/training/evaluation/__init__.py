"""Held-out evaluation: val scores with fixed masks, the evaluate stage's report, the NSP
baseline."""
