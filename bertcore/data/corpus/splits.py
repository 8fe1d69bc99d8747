"""The corpus's two splits on disk, the format's one owner: `train.txt` and `val.txt` in the
corpus folder, UTF-8, one sentence per line, a blank line between documents (the convention
of Google's `create_pretraining_data.py`). `writer.py` writes them; everything that reads
them (the samples, the vocabulary, the probes, the built-in tasks, the stages) names them
through `split_file` and reads documents through `read_documents`."""

from __future__ import annotations

from pathlib import Path

from bertcore.common.errors import BertError
from bertcore.common.text_files import read_utf8

SPLITS = ("train", "val")


def split_file(corpus_dir: str | Path, split: str) -> Path:
    """The file of `split` ("train" or "val") in a corpus folder."""
    assert split in SPLITS, split
    return Path(corpus_dir) / f"{split}.txt"


def read_documents(path: str | Path) -> list[list[str]]:
    """The documents of a split file, each a list of its sentences (blank lines skipped)."""
    path = Path(path)
    if not path.is_file():
        raise BertError(f"{path} not found: make the corpus first (bert corpus), or point to "
                        "its folder")
    return [[s.strip() for s in block.splitlines() if s.strip()]
            for block in read_utf8(path).split("\n\n") if block.strip()]
