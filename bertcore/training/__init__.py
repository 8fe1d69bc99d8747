"""Pretraining, in layers that import only downwards (tests/test_layout.py): `config` (the
params sections) < `length` (how long a phase runs) < `hardware` (threads, torch.distributed)
< `data` (what each step sees) < `checkpoints` (their format and the run identity they
record) < `evaluation` (val scores) < `loop` (the Trainer, one step, budget, checkpointer) <
`run` (one whole run end to end, the evaluate stage, the export)."""
