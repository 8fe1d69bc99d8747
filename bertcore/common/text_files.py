"""Text files the stages read that must be UTF-8 (the corpus's splits): one that is not is a
BertError naming the file and the line of the first byte that is not, never a traceback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from bertcore.common.errors import BertError

# what the corpus's splits are and how to get them again
CORPUS_FIX = ("the corpus's files are UTF-8: rebuild it with `bert corpus`, or pass --corpus a "
              "corpus folder of UTF-8 text")


def not_utf8(path: str | os.PathLike, line: int, fix: str = CORPUS_FIX) -> BertError:
    return BertError(f"{path}:{line} is not UTF-8 text; {fix}")


def read_utf8(path: str | os.PathLike, fix: str = CORPUS_FIX) -> str:
    """The whole text of `path`, line breaks as `open` reads them (CRLF and CR as LF)."""
    data = Path(path).read_bytes()
    try:
        return _newlines(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise not_utf8(path, data.count(b"\n", 0, error.start) + 1, fix) from None


def utf8_lines(path: str | os.PathLike, fix: str = CORPUS_FIX) -> Iterator[str]:
    """The lines of `path`, each with its line break (LF), read as they are asked for."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield _newlines(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise not_utf8(path, number, fix) from None


def _newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")
