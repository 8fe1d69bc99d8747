"""One pretraining run: its inputs, phases, report and MLflow run; the evaluate stage's
held-out scores (`heldout`) and the export."""
