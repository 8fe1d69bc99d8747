"""What uses a pretrained model: `finetune` (the one fine-tuning loop, and a classifier from the
pretrained encoder against the same from scratch) with its labelled data in `tasks` and its
scores in `metrics`, `glue` (GLUE's tasks over seeds), `probes` (zero-shot probes of the MLM),
and `prune` (the prune stage's run) with the head-importance scoring and surgery in `heads`;
their params sections in `config` (GLUE's in `glue.config`)."""
