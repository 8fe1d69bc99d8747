"""One pretraining run: its inputs, phases, length, identity, time budget, report and MLflow
run."""
