"""A vocabulary folder (`data/vocab`): its special tokens and file names, written so that both
`tokenizers.Tokenizer.from_file` and `transformers.BertTokenizerFast.from_pretrained` load it
and give the same ids, read back checked, fingerprinted, and the casing rules it carries."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    normalizers,
    pre_tokenizers,
    processors,
)

from bertcore.common.errors import BertError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# The ids of a TRAINED vocabulary; an existing one may have others (BERT's: 0, 100..103), so
# code that may meet one looks them up (`tokenizer.token_to_id`, masking.VocabSpec).
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))

VOCAB_FILE = "vocab.txt"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


def save_vocab(tokenizer: Tokenizer, out_dir: str | Path) -> None:
    """Write vocab.txt, tokenizer.json and the transformers config files into `out_dir`, with
    the casing rules of the tokenizer's BERT normaliser in tokenizer_config.json (which
    transformers obeys)."""
    out_dir = Path(out_dir)
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    assert [vocab[t] for t in tokens] == list(range(len(tokens))), "vocab ids are not contiguous"
    (out_dir / VOCAB_FILE).write_text("".join(f"{t}\n" for t in tokens), encoding="utf-8")
    tokenizer.save(str(out_dir / TOKENIZER_FILE))
    rules = casing_rules(tokenizer)
    special = {f"{token[1:-1].lower()}_token": token for token in SPECIAL_TOKENS}  # pad_token...
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
        (TOKENIZER_CONFIG_FILE, tokenizer_config),
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
# Casing (what an existing vocabulary brings; see bertcore.data.vocab.existing)


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


def bert_pipeline(tokenizer: Tokenizer, rules: CasingRules) -> Tokenizer:
    """`tokenizer` with BERT's normaliser (with `rules`), pre-tokeniser and decoder."""
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=rules.chinese_chars,
        strip_accents=rules.strip_accents, lowercase=rules.lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tokenizer


def finish_tokenizer(tokenizer: Tokenizer, rules: CasingRules) -> None:
    """`bert_pipeline`, the special tokens matched whole, the [CLS] A [SEP] B [SEP] template
    with this vocabulary's ids, no truncation or padding (the samples stage must see whole
    sentences): a trained vocabulary and an existing one work exactly as BERT's."""
    bert_pipeline(tokenizer, rules)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                  for t in SPECIAL_TOKENS])
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tokenizer.no_truncation()
    tokenizer.no_padding()
