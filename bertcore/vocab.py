"""The WordPiece vocabulary: trained with `tokenizers` exactly as BERT's tokenizer works
(BERT normaliser with CJK characters split apart, BERT pre-tokeniser, `##` continuations),
or taken from an existing one (`bertcore.vocab_source`), saved so that both
`tokenizers.Tokenizer.from_file` and `transformers.BertTokenizerFast.from_pretrained` load it
and give the same ids; and how well it fits a corpus (`vocab_coverage`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
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

from bertcore.errors import BertError, require

log = logging.getLogger(__name__)

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# The ids of a TRAINED vocabulary; an existing one may have others (BERT's: 0, 100..103), so
# code that may meet one looks them up (`tokenizer.token_to_id`, masking.VocabSpec).
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))

VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
TRAIN = "train"  # vocab.source: train a new vocabulary on the corpus
# vocab.vocab_size: auto = one token per word seen at least AUTO_MIN_COUNT times in the train
# split, clamped to AUTO_RANGE: rarer words are left to ## pieces, so most tokens occur often
# enough to be learnt (a fixed 8000 on 0.3 M characters leaves most tokens rare).
AUTO = "auto"
AUTO_MIN_COUNT = 5
AUTO_RANGE = (500, 30522)  # 30522: BERT's own vocabulary


@dataclasses.dataclass(frozen=True)
class VocabConfig:
    # train, or an existing vocabulary: a vocab.txt, a tokenizer.json, or a folder holding a
    # Hugging Face tokenizer or model (tokenizer.json, and/or vocab.txt + tokenizer_config.json)
    source: str = TRAIN
    vocab_size: int | str = AUTO  # these two: only when training; auto: see auto_vocab_size
    min_frequency: int = 2
    # Casing and accents of a trained vocabulary, or of a bare vocab.txt; other sources bring
    # their own (from tokenizer_config.json or the tokenizer.json normaliser).
    lowercase: bool = True
    strip_accents: bool | None = None  # None: follow `lowercase`, as BERT does

    def __post_init__(self):
        require(bool(self.source.strip()), "source", self.source,
                "train, or the path of a vocab.txt, a tokenizer.json or a tokenizer folder")
        size = self.vocab_size
        require(size == AUTO or (type(size) is int and 32 <= size <= 1_000_000),
                "vocab_size", size, f"{AUTO} or an integer in 32..1000000")
        require(self.min_frequency >= 1, "min_frequency", self.min_frequency, "an integer >= 1")

    @property
    def strips_accents(self) -> bool:
        return self.lowercase if self.strip_accents is None else self.strip_accents


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


def save_vocab(tokenizer: Tokenizer, out_dir: str | Path,
               config: VocabConfig | None = None) -> None:
    """Write vocab.txt, tokenizer.json and the transformers config files into `out_dir`.

    The casing rules written into tokenizer_config.json (which transformers obeys) are those
    of the tokenizer's BERT normaliser, so `config` is not needed (callers may still pass it).
    """
    out_dir = Path(out_dir)
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    assert [vocab[t] for t in tokens] == list(range(len(tokens))), "vocab ids are not contiguous"
    (out_dir / VOCAB_FILE).write_text("".join(f"{t}\n" for t in tokens), encoding="utf-8")
    tokenizer.save(str(out_dir / TOKENIZER_FILE))
    rules = casing_rules(tokenizer)
    special = {
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
    }
    tokenizer_config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": rules.lowercase,
        "strip_accents": rules.strip_accents,
        "tokenize_chinese_chars": rules.chinese_chars,
        "model_max_length": 512,
        "clean_up_tokenization_spaces": False,
        **special,
    }
    for name, data in (
        ("tokenizer_config.json", tokenizer_config),
        ("special_tokens_map.json", special),
    ):
        (out_dir / name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def read_vocab(vocab_dir: str | Path) -> list[str]:
    """The tokens of vocab.txt in id order."""
    path = Path(vocab_dir) / VOCAB_FILE
    if not path.is_file():
        raise BertError(f"no vocabulary at {path}: run `bert vocab` first")
    return path.read_text(encoding="utf-8").splitlines()


def vocab_fingerprint(vocab_dir: str | Path) -> str:
    """sha256 hex of vocab.txt's bytes: samples and models record it to catch mismatches."""
    path = Path(vocab_dir) / VOCAB_FILE
    if not path.is_file():
        raise BertError(f"no vocabulary at {path}: run `bert vocab` first")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_tokenizer(vocab_dir: str | Path) -> Tokenizer:
    """tokenizer.json of `vocab_dir`, checked to agree with its vocab.txt."""
    path = Path(vocab_dir) / TOKENIZER_FILE
    if not path.is_file():
        raise BertError(f"no tokenizer at {path}: run `bert vocab` first")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises plain Exception subclasses
        raise BertError(f"{path} is not a valid tokenizer ({exc}): rerun `bert vocab`") from None
    tokens = read_vocab(vocab_dir)
    vocab = tokenizer.get_vocab()
    if len(vocab) != len(tokens) or any(vocab.get(t) != i for i, t in enumerate(tokens)):
        raise BertError(
            f"{path} and {VOCAB_FILE} in {vocab_dir} disagree: rerun `bert vocab` to rebuild both"
        )
    return tokenizer


# ---------------------------------------------------------------------------------------------
# Casing (what an existing vocabulary brings; see bertcore.vocab_source)


@dataclasses.dataclass(frozen=True)
class CasingRules:
    """What BERT's normaliser does before WordPiece: lower-case, strip accents, put spaces
    around CJK characters. `strip_accents` None follows `lowercase` (BERT's convention)."""

    lowercase: bool
    strip_accents: bool | None
    chinese_chars: bool = True

    @property
    def strips_accents(self) -> bool:
        return self.lowercase if self.strip_accents is None else self.strip_accents

    def describe(self) -> str:
        return (f"lowercase {str(self.lowercase).lower()}, "
                f"strip_accents {str(self.strips_accents).lower()}")


def casing_rules(tokenizer: Tokenizer) -> CasingRules:
    """The rules of a tokenizer's BERT normaliser (the one `save_vocab` writes down)."""
    normalizer = json.loads(tokenizer.to_str()).get("normalizer") or {}
    if normalizer.get("type") != "BertNormalizer":
        raise ValueError("the tokenizer has no BertNormalizer")  # a bug: we always set one
    return CasingRules(bool(normalizer["lowercase"]), normalizer["strip_accents"],
                       bool(normalizer["handle_chinese_chars"]))


# ---------------------------------------------------------------------------------------------
# Coverage


COVERAGE_BYTES = 4 << 20  # coverage is measured on at most this much of the train split
_COVERAGE_WINDOWS = 16  # ... read as this many windows spread evenly through a larger file


def vocab_coverage(tokenizer: Tokenizer, corpus_file: str | Path,
                   max_bytes: int = COVERAGE_BYTES, batch_size: int = 2000) -> dict:
    """How well the vocabulary fits a corpus file: words (as BERT's pre-tokeniser splits
    them), tokens, [UNK] tokens, their share (`unk_rate`) and tokens per word. A file larger
    than `max_bytes` is measured on evenly spread windows of whole lines of that much in all
    (`sampled_bytes` says how much was read), so the cost does not grow with the corpus."""
    unk = json.loads(tokenizer.to_str())["model"].get("unk_token", "[UNK]")
    unk_id = tokenizer.token_to_id(unk)
    lines = words = tokens = unknown = sampled = 0
    batch: list[str] = []

    def measure(batch: list[str]) -> None:
        nonlocal words, tokens, unknown
        for encoding in tokenizer.encode_batch(batch, add_special_tokens=False):
            word_ids = [w for w in encoding.word_ids if w is not None]
            words += (max(word_ids) + 1) if word_ids else 0
            tokens += len(encoding.ids)
            unknown += encoding.ids.count(unk_id)

    for raw in _sample_lines(Path(corpus_file), max_bytes):
        sampled += len(raw)
        line = raw.decode("utf-8", errors="replace").strip()
        if line:
            lines += 1
            batch.append(line)
            if len(batch) >= batch_size:
                measure(batch)
                batch = []
    if batch:
        measure(batch)
    return {
        "sampled_bytes": sampled,
        "lines": lines,
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


def files_sha256(files: Iterable[Path]) -> str:
    """sha256 over the names and bytes of `files` in order (what an existing vocabulary was
    read from), for the metrics."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\n" + path.read_bytes())
    return digest.hexdigest()
