"""Pretraining's data: the samples' order over epochs, masking, and batches of it."""
