"""The training loop: the Trainer, one optimizer step, the schedule, the records and stopping."""
