"""What the tests share besides fixtures (those stay in tests/conftest.py): running `bert` as a
user does (bert.py, on a preloaded fork server: preloaded.py), tiny data to run it on
(tiny_pretrain.py, glue_files.py, pattern_store.py, samples.py), a StepRunner on that data
(trainer.py), a tiny filesystem (tiny_fs.py), a worker that dies (dying_worker.py), permissions
that hold for root too (unprivileged.py). `tests/` is on the path (pytest puts conftest's
folder there), so tests import `helpers.X`."""
