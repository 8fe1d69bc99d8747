"""Held-out evaluation: val scores with fixed masks, the NSP baseline."""
