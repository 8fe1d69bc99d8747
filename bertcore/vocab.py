"""The WordPiece vocabulary: trained with `tokenizers` exactly as BERT's tokenizer works
(BERT normaliser with CJK characters split apart, BERT pre-tokeniser, `##` continuations),
saved so that both `tokenizers.Tokenizer.from_file` and `transformers.BertTokenizerFast.
from_pretrained` load it and give the same ids."""

from __future__ import annotations

import dataclasses
import hashlib
import json
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

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))

VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"


@dataclasses.dataclass(frozen=True)
class VocabConfig:
    vocab_size: int = 8000
    min_frequency: int = 2
    lowercase: bool = True
    strip_accents: bool | None = None  # None: follow `lowercase`, as BERT does

    def __post_init__(self):
        require(
            32 <= self.vocab_size <= 1_000_000, "vocab_size", self.vocab_size, "32..1000000"
        )
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


def train_tokenizer(
    batches: Iterable[list[str]], config: VocabConfig, *, show_progress: bool = False
) -> Tokenizer:
    """Train WordPiece on batches of lines; special tokens get ids 0..4 in SPECIAL_TOKENS order."""
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


def save_vocab(tokenizer: Tokenizer, out_dir: str | Path, config: VocabConfig) -> None:
    """Write vocab.txt, tokenizer.json and the transformers config files into `out_dir`."""
    out_dir = Path(out_dir)
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    assert [vocab[t] for t in tokens] == list(range(len(tokens))), "vocab ids are not contiguous"
    (out_dir / VOCAB_FILE).write_text("".join(f"{t}\n" for t in tokens), encoding="utf-8")
    tokenizer.save(str(out_dir / TOKENIZER_FILE))
    special = {
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
    }
    tokenizer_config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": config.lowercase,
        "strip_accents": config.strips_accents,
        "tokenize_chinese_chars": True,
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
