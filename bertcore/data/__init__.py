"""The data side, one sub-package per stage before training: `corpus` (raw text -> cleaned
train/val sentences), `vocab` (a WordPiece vocabulary, trained or taken), `samples` (NSP pairs
as memory-mappable arrays). Masking is not here: it happens per batch at training time
(`bertcore.training.data.masking`)."""
