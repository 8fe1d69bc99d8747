"""BERT itself: `bert` (the model, read top to bottom: config, embeddings, layers, heads,
losses), `packing` (a batch's real tokens alone, for the unpadded encoder), `config` (the
`model:` params section), `local_init` and `init_from` (how its weights start), `classifier`
(the fine-tuning model), `hf` (weights on disk, ours and Hugging Face's: the one place that
maps our parameter names to transformers') and `tokenizer` (the tokenizer a model is used
with, checked to fit it). The folders a model is saved in: `bertcore.saved`."""
