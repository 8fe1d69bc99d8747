"""What uses a pretrained model: `finetune` (a classifier from the pretrained encoder against
the same from scratch) with its labelled data in `tasks`, and `prune` (the prune stage's run)
with the head-importance scoring and surgery in `heads`."""
