"""The vocab stage's library: `config` (its params), `training` (a new WordPiece vocabulary),
`existing` (a user's vocab.txt, tokenizer.json or tokenizer folder), `files` (the data/vocab
folder: special tokens, writing and reading it back) and `coverage` (how it fits a corpus)."""
