"""BERT itself: `bert` (the model, read top to bottom: config, embeddings, layers, heads,
losses), `packing` (a batch's real tokens alone, for the unpadded encoder), `config` (the
`model:` params section), `local_init` (how its weights start), `classifier` (the fine-tuning
model) and `tokenizer` (the tokenizer a model is used with, checked to fit it). The folders a
model is saved in, and the weights it starts from with `model.init_from`: `bertcore.saved`."""
