"""The samples stage's library: `config` (its params), `build` (corpus -> NSP samples, in
worker processes), `doctable` (tokenised documents on disk), `pairing` (Google's NSP algorithm
for one document) and `store` (the samples folder: arrays, meta.json, reading by memory map)."""
