"""An existing vocabulary (`vocab.source` = a path): a vocab.txt, a tokenizer.json or a
Hugging Face tokenizer/model folder, read into a tokenizer that works exactly as BERT's, with
the casing rules it brings (or, for a bare vocab.txt, the configured ones). `read_tokenizer`
is the reading alone, also for the tokenizer of a model (`bertcore.model.tokenizer`)."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from tokenizers import Tokenizer, models

from bertcore.common.errors import BertError
from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.files import (
    SPECIAL_TOKENS,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    VOCAB_FILE,
    CasingRules,
    finish_tokenizer,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass
class SourceVocabulary:
    """An existing vocabulary, ready for `save_vocab`: `tokenizer` has BERT's normaliser with
    `rules`, its pre-tokeniser, WordPiece model and added tokens, and BERT's template."""

    tokenizer: Tokenizer
    rules: CasingRules
    rules_from: str  # where the casing rules came from, for messages and metrics
    files: list[Path]  # what was read (their content is fingerprinted in the metrics)


CONFIGURED_RULES = "vocab.lowercase / vocab.strip_accents"


def load_source_vocabulary(source: str | Path, config: VocabConfig) -> SourceVocabulary:
    """Read `vocab.source`: a vocab.txt (any name not ending in .json), a tokenizer.json, or a
    folder with tokenizer.json and/or vocab.txt (+ tokenizer_config.json).

    Casing rules as `read_tokenizer` finds them, a bare vocab.txt taking `config`'s. A
    warning says when they disagree with `vocab.lowercase` / `vocab.strip_accents`. Raises
    BertError for a missing or unusable source, or missing special tokens.
    """
    path = Path(source).expanduser()
    if not path.exists():
        raise BertError(f"vocab.source not found: {source} (train, or the path of a vocab.txt, "
                        "a tokenizer.json or a folder holding one)")
    chosen = CasingRules(config.lowercase, config.strip_accents)
    vocabulary = read_tokenizer(path, chosen, CONFIGURED_RULES, f"vocab.source {source}")
    rules = vocabulary.rules
    if vocabulary.rules_from == CONFIGURED_RULES:
        _warn_if_casing_looks_wrong(vocabulary.files[0], vocabulary.tokenizer, rules)
    elif (chosen.lowercase, chosen.strips_accents) != (rules.lowercase, rules.strips_accents):
        log.warning("vocab: casing and accents come from %s (%s); vocab.lowercase / "
                    "vocab.strip_accents (%s) are not used", vocabulary.rules_from,
                    rules.describe(), chosen.describe())
    _check_special_order(str(source), vocabulary.tokenizer)
    return vocabulary


def read_tokenizer(path: Path, fallback: CasingRules, fallback_from: str,
                   what: str) -> SourceVocabulary:
    """A vocab.txt, a tokenizer.json, or a folder holding either (tokenizer.json first),
    read into a tokenizer that works exactly as BERT's.

    Casing rules: from the folder's tokenizer_config.json when there is one (as transformers
    does: do_lower_case, strip_accents, tokenize_chinese_chars, with BertTokenizer's
    defaults), else from the tokenizer.json normaliser, else (a bare vocab.txt) `fallback`,
    then said to come from `fallback_from`. `what` names the source in errors ("vocab.source
    X", "--vocab X"). Raises BertError for an unusable source or missing special tokens."""
    config_file = None
    if path.is_dir():
        found = [c for c in (path / TOKENIZER_FILE, path / VOCAB_FILE) if c.is_file()]
        if not found:
            raise BertError(f"{what} holds neither {TOKENIZER_FILE} nor {VOCAB_FILE}: point it "
                            "at a tokenizer or model folder")
        path = found[0]
        if (path.parent / TOKENIZER_CONFIG_FILE).is_file():
            config_file = path.parent / TOKENIZER_CONFIG_FILE
    if path.suffix == ".json":
        tokenizer, normaliser_rules = _from_tokenizer_json(path)
    else:
        tokenizer, normaliser_rules = _from_vocab_txt(path, what), None
    files = [path] + ([config_file] if config_file else [])
    if config_file is not None:
        rules, rules_from = _rules_of_config(config_file), str(config_file)
    elif normaliser_rules is not None:
        rules, rules_from = normaliser_rules, f"the normaliser of {path}"
    else:
        rules, rules_from = fallback, fallback_from
    _require_special_tokens(what, tokenizer)
    finish_tokenizer(tokenizer, rules)
    return SourceVocabulary(tokenizer, rules, rules_from, files)


def _from_tokenizer_json(path: Path) -> tuple[Tokenizer, CasingRules | None]:
    """A tokenizer.json: its WordPiece model and added tokens, and its normaliser's rules
    (None when it has no normaliser that says)."""
    try:
        tokenizer = Tokenizer.from_file(str(path))
        data = json.loads(tokenizer.to_str())
    except Exception as exc:  # tokenizers raises plain Exception subclasses
        raise BertError(f"{path} is not a tokenizer.json that `tokenizers` can read ({exc})"
                        ) from None
    model = data.get("model") or {}
    if model.get("type") != "WordPiece" or model.get("continuing_subword_prefix") != "##":
        raise BertError(f"{path} is a {model.get('type', 'unknown')} tokenizer; BERT needs "
                        "WordPiece with ## continuations (a BERT tokenizer.json or vocab.txt)")
    vocab = tokenizer.get_vocab()
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise BertError(f"the token ids of {path} have gaps: it cannot be written as a vocab.txt")
    return tokenizer, _rules_of_normalizer(data.get("normalizer"), tokenizer)


def _rules_of_normalizer(normalizer: dict | None, tokenizer: Tokenizer) -> CasingRules | None:
    if not normalizer:
        return None
    if normalizer.get("type") == "BertNormalizer":
        return CasingRules(bool(normalizer.get("lowercase")), normalizer.get("strip_accents"),
                           bool(normalizer.get("handle_chinese_chars", True)))
    # Another normaliser (a Sequence of Lowercase, StripAccents...): see what it does.
    probe = tokenizer.normalizer.normalize_str("ÉA")
    return CasingRules(lowercase=probe.lower() == probe, strip_accents="É" not in probe.upper())


def _rules_of_config(path: Path) -> CasingRules:
    """tokenizer_config.json's rules, with the defaults of transformers' BertTokenizer."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BertError(f"{path} is not valid JSON ({exc}): fix or remove it") from None
    strip = data.get("strip_accents")
    return CasingRules(bool(data.get("do_lower_case", True)),
                       None if strip is None else bool(strip),
                       bool(data.get("tokenize_chinese_chars", True)))


def _from_vocab_txt(path: Path, what: str) -> Tokenizer:
    """A vocab.txt, one token per line in id order (as transformers reads it)."""
    try:
        with open(path, encoding="utf-8") as handle:
            tokens = [line.rstrip("\n") for line in handle]
    except UnicodeDecodeError:
        raise BertError(f"{path} is not UTF-8 text: {what.split()[0]} needs a vocab.txt (one "
                        "token per line), a tokenizer.json or a folder") from None
    except OSError as exc:
        raise BertError(f"cannot read {path}: {exc.strerror or exc}") from None
    index: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token in index:
            raise BertError(f"{path} lists {token!r} twice (lines {index[token] + 1} and "
                            f"{i + 1}): a vocab.txt names each token once")
        index[token] = i
    if not tokens:
        raise BertError(f"{path} is empty: a vocab.txt lists one token per line")
    unk = "[UNK]" if "[UNK]" in index else tokens[0]  # missing [UNK] is reported later
    return Tokenizer(models.WordPiece(index, unk_token=unk, continuing_subword_prefix="##",
                                      max_input_chars_per_word=100))


def _warn_if_casing_looks_wrong(path: Path, tokenizer: Tokenizer, rules: CasingRules) -> None:
    """A bare vocab.txt does not say whether it is cased; its tokens do."""
    words = [t.removeprefix("##") for t in tokenizer.get_vocab()
             if not (t.startswith("[") and t.endswith("]"))]
    capitals = [w for w in words if any(c.isupper() for c in w)]
    latin_lower = any(c.islower() for w in words for c in w)
    if rules.lowercase and capitals:
        log.warning("vocab: %s holds %d tokens with capitals (e.g. %r) but vocab.lowercase is "
                    "true, so they never match: set vocab.lowercase: false for a cased "
                    "vocabulary", path, len(capitals), sorted(capitals)[0])
    elif not rules.lowercase and latin_lower and not capitals:
        log.warning("vocab: %s holds no token with capitals but vocab.lowercase is false: "
                    "capitalised words will not match; set vocab.lowercase: true for an "
                    "uncased vocabulary", path)


def _require_special_tokens(what: str, tokenizer: Tokenizer) -> None:
    vocab = tokenizer.get_vocab()
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise BertError(f"{what} lacks the special token(s) {' '.join(missing)}: BERT needs "
                        f"{' '.join(SPECIAL_TOKENS)}")


def _check_special_order(source: str, tokenizer: Tokenizer) -> None:
    """Masking treats every id up to the last special token as special (for pretraining)."""
    vocab = tokenizer.get_vocab()
    last = max(vocab[t] for t in SPECIAL_TOKENS)
    ordinary = [t for t, i in vocab.items() if i < last and not (t.startswith("[")
                                                                   and t.endswith("]"))]
    if last + 1 >= len(vocab):
        raise BertError(f"in vocab.source {source} a special token comes last (id {last}): "
                        "masking treats every id up to the last special token as special, so "
                        "nothing could be masked; put the special tokens first")
    if ordinary:
        log.warning("vocab: %d ordinary tokens (e.g. %r) come before id %d, the last special "
                    "token: masking treats them as special and never masks them", len(ordinary),
                    sorted(ordinary, key=vocab.__getitem__)[0], last)
