"""BERT itself: `bert` (the model, read top to bottom: config, embeddings, layers, heads,
losses), `packing` (a batch's real tokens alone, for the unpadded encoder), `config` (the
`model:` params section), `local_init` and `init_from` (how its weights start), `classifier`
(the fine-tuning model), `hf` (weights on disk, ours and Hugging Face's: the one place that
maps our parameter names to transformers'), `tokenizer` (the tokenizer a model is used
with, checked to fit it) and, for a model our pretraining wrote, `trained_model` (it loaded
with its tokenizer), `model_run` (the MLflow run that wrote it) and `run_reports` (the
reports logged into that run)."""
