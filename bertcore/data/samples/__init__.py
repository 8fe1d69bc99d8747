"""The samples stage's library: `config` (its params), `build` (corpus -> NSP samples, in
worker processes), `tokenizing` (a corpus split into a document table and its tokens),
`doctable` (the document table on disk: writer and reader), `pairing` (Google's NSP algorithm
for one document) and `store` (the samples folder: arrays, meta.json, reading by memory map)."""
