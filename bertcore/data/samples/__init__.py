"""The samples stage's library, one module per on-disk format (writer and reader) and per place
the work is done: `config` (its params), `store` (the samples folder: arrays and meta.json,
written and read by memory map), `doctable` (the document table in `.work/`: written and
read), `tokenizing` (a corpus split into a document table and its tokens, in worker
processes), `pairing` (NSP pairs: Google's algorithm for one document, a shard per worker
task), `build` (the main process: corpus -> samples folder) and `verify` (a folder checked
against its meta.json)."""
