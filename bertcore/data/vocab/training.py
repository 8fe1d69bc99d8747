"""Training a WordPiece vocabulary with `tokenizers`, exactly as BERT's tokenizer works: BERT
normaliser with CJK characters split apart, BERT pre-tokeniser, `##` continuations; and the
size `vocab_size: auto` picks for a corpus."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from bertcore.data.vocab.config import AUTO_MIN_COUNT, AUTO_RANGE, VocabConfig
from bertcore.data.vocab.files import CLS_ID, SEP_ID, SPECIAL_TOKENS


def new_tokenizer(config: VocabConfig) -> Tokenizer:
    """An untrained BERT WordPiece tokenizer (normaliser, pre-tokeniser, decoder)."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,  # every CJK character becomes its own word
        strip_accents=config.strips_accents,
        lowercase=config.lowercase,
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def auto_vocab_size(batches: Iterable[list[str]], config: VocabConfig) -> tuple[int, int]:
    """`vocab_size: auto` for a corpus: (the size, the number of distinct words seen at least
    AUTO_MIN_COUNT times), words as BERT's normaliser (with `config`'s casing) and
    pre-tokeniser split them; the size is that number clamped to AUTO_RANGE."""
    tokenizer = new_tokenizer(config)
    counts: Counter[str] = Counter()
    for batch in batches:
        for line in batch:
            text = tokenizer.normalizer.normalize_str(line)
            counts.update(word for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(text))
    frequent = sum(1 for count in counts.values() if count >= AUTO_MIN_COUNT)
    low, high = AUTO_RANGE
    return min(max(frequent, low), high), frequent


def train_tokenizer(
    batches: Iterable[list[str]], config: VocabConfig, *, show_progress: bool = False
) -> Tokenizer:
    """Train WordPiece on batches of lines; special tokens get ids 0..4 in SPECIAL_TOKENS order.
    `config.vocab_size` must be a number here (resolve `auto` with auto_vocab_size first)."""
    if not isinstance(config.vocab_size, int):
        raise ValueError(f"vocab_size {config.vocab_size!r}: resolve it with auto_vocab_size")
    tokenizer = new_tokenizer(config)
    trainer = trainers.WordPieceTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        continuing_subword_prefix="##",
        show_progress=show_progress,
    )
    tokenizer.train_from_iterator(batches, trainer=trainer)
    for token_id, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == token_id, token
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)],
    )
    return tokenizer


def line_batches(path: str | Path, batch_size: int = 2000) -> Iterator[list[str]]:
    """Stream the non-blank lines of a corpus file in lists of `batch_size`."""
    batch: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            line = line.strip()
            if line:
                batch.append(line)
                if len(batch) >= batch_size:
                    yield batch
                    batch = []
    if batch:
        yield batch

