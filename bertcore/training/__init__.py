"""Pretraining. `pretrain` runs it end to end; `loop` is the training loop and `step` one
optimizer step; `config` is the `train:` params section. Around them: `masking` and `batches`
(what each step sees), `schedule` and `budget` (how long and how fast), `checkpoint`, `resume`
and `stopping` (interrupting and continuing), `evaluation` and `records` (what is measured and
kept), `devices` and `distributed` (where it runs)."""
