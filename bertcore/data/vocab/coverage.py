"""How well a vocabulary fits a corpus: the share of [UNK] tokens and tokens per word, on
evenly spread windows of a large file, so the cost does not grow with the corpus."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer

COVERAGE_BYTES = 4 << 20  # coverage is measured on at most this much of the train split
_COVERAGE_WINDOWS = 16  # ... read as this many windows spread evenly through a larger file


def vocab_coverage(tokenizer: Tokenizer, corpus_file: str | Path,
                   max_bytes: int = COVERAGE_BYTES, batch_size: int = 2000) -> dict:
    """How well the vocabulary fits a corpus file: words (as BERT's pre-tokeniser splits
    them), tokens, [UNK] tokens, their share (`unk_rate`) and tokens per word. A file larger
    than `max_bytes` is measured on evenly spread windows of whole lines of that much in all
    (`sampled_bytes` says how much was read), so the cost does not grow with the corpus."""
    unk_id = tokenizer.token_to_id(tokenizer.model.unk_token)
    raw_lines = list(_sample_lines(Path(corpus_file), max_bytes))  # about max_bytes at most
    texts = [text for raw in raw_lines
             if (text := raw.decode("utf-8", errors="replace").strip())]
    words = tokens = unknown = 0
    for start in range(0, len(texts), batch_size):
        batch = texts[start : start + batch_size]
        for encoding in tokenizer.encode_batch(batch, add_special_tokens=False):
            word_ids = [w for w in encoding.word_ids if w is not None]
            words += (max(word_ids) + 1) if word_ids else 0
            tokens += len(encoding.ids)
            unknown += encoding.ids.count(unk_id)
    return {
        "sampled_bytes": sum(map(len, raw_lines)),
        "lines": len(texts),
        "words": words,
        "tokens": tokens,
        "unk_tokens": unknown,
        "unk_rate": round(unknown / tokens, 6) if tokens else 0.0,
        "tokens_per_word": round(tokens / words, 4) if words else 0.0,
    }


def _sample_lines(path: Path, max_bytes: int) -> Iterator[bytes]:
    """All lines of `path`, or for a larger file whole lines from _COVERAGE_WINDOWS windows
    spread evenly through it, about `max_bytes` in all."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if size <= max_bytes:
            yield from handle
            return
        window = max_bytes // _COVERAGE_WINDOWS
        for i in range(_COVERAGE_WINDOWS):
            handle.seek(i * (size - window) // (_COVERAGE_WINDOWS - 1))
            if i:
                handle.readline()  # the rest of a line begun before the window
            read = 0
            while read < window:
                line = handle.readline()
                if not line:
                    break
                read += len(line)
                yield line
