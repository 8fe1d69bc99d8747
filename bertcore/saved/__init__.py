"""The model saved: the folders a model lives in on disk and what goes with them, above the
model itself (`bertcore.model`) and below training, which writes them. `hf` (weights on disk,
ours and Hugging Face's; `hf_names`: the one place that maps our parameter names to
transformers'), what
an export holds beside them (`sentence_embeddings`: sentence-transformers' files;
`onnx_export`: the encoder as ONNX; `card`: the model card, its metadata from the `card`
params in `card_meta`), `init_from` (an existing BERT folder a pretraining run starts from),
`pretrained` (the folder our pretraining writes: the model beside `training.json`, loaded with
the vocabulary it was trained with), `trained_model` (any BERT folder loaded with the
tokenizer that fits it), `model_run` (the MLflow run that wrote a folder's weights, found by
their sha256) and `run_reports` (the reports logged into that run)."""
