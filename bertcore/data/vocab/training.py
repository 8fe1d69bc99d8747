"""Training a WordPiece vocabulary with `tokenizers`, exactly as BERT's tokenizer works: BERT
normaliser with CJK characters split apart, BERT pre-tokeniser, `##` continuations; and the
size `vocab_size: auto` picks for a corpus.

The same lines and settings give the same vocabulary, byte for byte. `tokenizers`' own trainer
does not (0.23: models/bpe/trainer.rs, which WordPiece training wraps): it gives the starting
characters and `##x` continuations their ids in the iteration order of a randomly seeded hash
map, and breaks ties between merges of equal count by those ids, so every run differs a little
(the order of the `##x` block; at 8000 tokens 2-12 tokens; at 30522 even the size). So training
takes two passes: the first lists the starting alphabet from a count of the distinct words, the
second gets it, sorted, as special tokens after the real ones (special tokens take
their ids first, in the order given), so no id comes from the hash map; the result is then
rebuilt as a plain WordPiece model whose only special tokens are the real five."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, models, trainers

from bertcore.data.vocab.config import AUTO_MIN_COUNT, AUTO_RANGE, VocabConfig
from bertcore.data.vocab.files import (
    SPECIAL_TOKENS,
    CasingRules,
    bert_pipeline,
    finish_tokenizer,
)


def new_tokenizer(config: VocabConfig) -> Tokenizer:
    """An untrained BERT WordPiece tokenizer (normaliser, pre-tokeniser, decoder); every CJK
    character becomes its own word."""
    return bert_pipeline(Tokenizer(models.WordPiece(unk_token="[UNK]",
                                                    continuing_subword_prefix="##")),
                         CasingRules(config.lowercase, config.strips_accents))


def auto_vocab_size(batches: Iterable[list[str]], config: VocabConfig) -> tuple[int, int]:
    """`vocab_size: auto` for a corpus: (the size, the number of distinct words seen at least
    AUTO_MIN_COUNT times), words as BERT's normaliser (with `config`'s casing) and
    pre-tokeniser split them; the size is that number clamped to AUTO_RANGE.

    The words are counted as the WordPiece trainer counts them (`distinct_words`)."""
    frequent = len(distinct_words(batches, config, AUTO_MIN_COUNT))
    low, high = AUTO_RANGE
    return min(max(frequent, low), high), frequent


def distinct_words(batches: Iterable[list[str]], config: VocabConfig, min_count: int = 1
                   ) -> list[str]:
    """The words of `batches` seen at least `min_count` times, as BERT's normaliser (with
    `config`'s casing) and pre-tokeniser split them: counted by `tokenizers`' word-level
    trainer, on its threads, from the same words its WordPiece trainer counts. (Counted here
    in Python, they held the stage's one thread for about as long as both training passes took
    on theirs, 2 MB/s, and ~100 bytes a distinct word.)"""
    counter = new_tokenizer(config)
    counter.model = models.WordLevel()
    counter.train_from_iterator(batches, trainer=trainers.WordLevelTrainer(
        vocab_size=sys.maxsize, min_frequency=min_count, special_tokens=[],
        show_progress=False))
    return list(counter.get_vocab())


def train_tokenizer(
    batches: Iterable[list[str]], config: VocabConfig, *, show_progress: bool = False
) -> Tokenizer:
    """Train WordPiece on batches of lines; special tokens get ids 0..4 in SPECIAL_TOKENS order.
    `batches` is read twice (a list, or `LineBatches(path)`; not a one-shot iterator), and
    `config.vocab_size` must be a number (resolve `auto` with auto_vocab_size first)."""
    if not isinstance(config.vocab_size, int):
        raise ValueError(f"vocab_size {config.vocab_size!r}: resolve it with auto_vocab_size")
    if iter(batches) is batches:
        raise TypeError("train_tokenizer reads the lines twice: pass a list or LineBatches(path)")
    alphabet = _starting_alphabet(batches, config)
    trained = new_tokenizer(config)
    trained.train_from_iterator(batches, trainer=_trainer(
        config.vocab_size, config, [*SPECIAL_TOKENS, *alphabet], show_progress))
    tokenizer = Tokenizer(models.WordPiece(vocab=trained.get_vocab(), unk_token="[UNK]",
                                           continuing_subword_prefix="##"))
    finish_tokenizer(tokenizer, CasingRules(config.lowercase, config.strips_accents))
    for token_id, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == token_id, token
    return tokenizer


def _starting_alphabet(batches: Iterable[list[str]], config: VocabConfig) -> list[str]:
    """What the WordPiece trainer puts in the vocabulary before any merge, sorted: every
    character of the words in `batches`, and `##x` for each one that follows another in a word
    (tokenizers' bpe/trainer.rs: `compute_alphabet`, all characters as no `limit_alphabet` is
    set, then `tokenize_words`). A count of the distinct words gives it: no trainer's pair
    counts, which a trainer of size 1 built only to stop before its first merge."""
    characters: set[str] = set()
    continuations: set[str] = set()
    for word in distinct_words(batches, config):
        characters.update(word)
        continuations.update(word[1:])
    return sorted(characters | {f"##{c}" for c in continuations})


def _trainer(size: int, config: VocabConfig, special: Iterable[str],
             show_progress: bool) -> trainers.WordPieceTrainer:
    return trainers.WordPieceTrainer(vocab_size=size, min_frequency=config.min_frequency,
                                     special_tokens=list(special), continuing_subword_prefix="##",
                                     show_progress=show_progress)


class LineBatches:
    """The non-blank lines of a corpus file in lists of `batch_size`, streamed; every iteration
    reads the file anew, so training can take two passes without holding the corpus."""

    def __init__(self, path: str | Path, batch_size: int = 2000):
        self.path, self.batch_size = Path(path), batch_size

    def __iter__(self) -> Iterator[list[str]]:
        with open(self.path, encoding="utf-8", errors="replace") as handle:
            lines = (text for line in handle if (text := line.strip()))
            while batch := list(itertools.islice(lines, self.batch_size)):
                yield batch
