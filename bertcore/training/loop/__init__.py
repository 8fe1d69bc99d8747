"""The training loop: the Trainer, one optimizer step, the schedule, a time budget, when it
checkpoints, the records and stopping."""
