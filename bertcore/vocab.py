"""The WordPiece vocabulary: trained with `tokenizers` exactly as BERT's tokenizer works
(BERT normaliser with CJK characters split apart, BERT pre-tokeniser, `##` continuations),
or taken from an existing one (`vocab.source`: a vocab.txt, a tokenizer.json or a Hugging
Face folder), saved so that both `tokenizers.Tokenizer.from_file` and `transformers.
BertTokenizerFast.from_pretrained` load it and give the same ids."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import (
    AddedToken,
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
# Existing vocabularies (vocab.source = a path)


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


@dataclasses.dataclass
class SourceVocabulary:
    """An existing vocabulary, ready for `save_vocab`: `tokenizer` has BERT's normaliser with
    `rules`, its pre-tokeniser, WordPiece model and added tokens, and BERT's template."""

    tokenizer: Tokenizer
    rules: CasingRules
    rules_from: str  # where the casing rules came from, for messages and metrics
    files: list[Path]  # what was read (their content is fingerprinted in the metrics)


def load_source_vocabulary(source: str | Path, config: VocabConfig) -> SourceVocabulary:
    """Read `vocab.source`: a vocab.txt (any name not ending in .json), a tokenizer.json, or a
    folder with tokenizer.json and/or vocab.txt (+ tokenizer_config.json).

    Casing rules: from the folder's tokenizer_config.json when there is one (as transformers
    does: do_lower_case, strip_accents, tokenize_chinese_chars, with BertTokenizer's defaults),
    else from the tokenizer.json normaliser, else (a bare vocab.txt) from `config`. A warning
    says when they disagree with `vocab.lowercase` / `vocab.strip_accents`. Raises BertError
    for a missing or unusable source, or missing special tokens.
    """
    path = Path(source).expanduser()
    if not path.exists():
        raise BertError(f"vocab.source not found: {source} (train, or the path of a vocab.txt, "
                        "a tokenizer.json or a folder holding one)")
    config_file = None
    if path.is_dir():
        candidates = [path / TOKENIZER_FILE, path / VOCAB_FILE]
        found = [c for c in candidates if c.is_file()]
        if not found:
            raise BertError(f"vocab.source {source} holds neither {TOKENIZER_FILE} nor "
                            f"{VOCAB_FILE}: point it at a tokenizer or model folder")
        path = found[0]
        if (path.parent / TOKENIZER_CONFIG_FILE).is_file():
            config_file = path.parent / TOKENIZER_CONFIG_FILE
    if path.suffix == ".json":
        tokenizer, normaliser_rules = _from_tokenizer_json(path)
    else:
        tokenizer, normaliser_rules = _from_vocab_txt(path), None
    files = [path] + ([config_file] if config_file else [])
    if config_file is not None:
        rules, rules_from = _rules_of_config(config_file), str(config_file)
    elif normaliser_rules is not None:
        rules, rules_from = normaliser_rules, f"the normaliser of {path}"
    else:
        rules = CasingRules(config.lowercase, config.strip_accents)
        rules_from = "vocab.lowercase / vocab.strip_accents"
        _warn_if_casing_looks_wrong(path, tokenizer, rules)
    chosen = CasingRules(config.lowercase, config.strip_accents)
    from_source = config_file is not None or normaliser_rules is not None
    if from_source and (chosen.lowercase, chosen.strips_accents) != (
        rules.lowercase, rules.strips_accents
    ):
        log.warning("vocab: casing and accents come from %s (%s); vocab.lowercase / "
                    "vocab.strip_accents (%s) are not used", rules_from, rules.describe(),
                    chosen.describe())
    _check_special_tokens(str(source), tokenizer)
    _finish(tokenizer, rules)
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


def _from_vocab_txt(path: Path) -> Tokenizer:
    """A vocab.txt, one token per line in id order (as transformers reads it)."""
    try:
        with open(path, encoding="utf-8") as handle:
            tokens = [line.rstrip("\n") for line in handle]
    except UnicodeDecodeError:
        raise BertError(f"{path} is not UTF-8 text: vocab.source needs a vocab.txt (one token "
                        "per line), a tokenizer.json or a folder") from None
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


def _check_special_tokens(source: str, tokenizer: Tokenizer) -> None:
    vocab = tokenizer.get_vocab()
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise BertError(f"vocab.source {source} lacks the special token(s) {' '.join(missing)}: "
                        f"BERT pretraining needs {' '.join(SPECIAL_TOKENS)}")
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


def _finish(tokenizer: Tokenizer, rules: CasingRules) -> None:
    """BERT's normaliser with `rules`, pre-tokeniser and decoder, the special tokens matched
    whole, the [CLS] A [SEP] B [SEP] template with this vocabulary's ids, no truncation or
    padding (the samples stage must see whole sentences)."""
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=rules.chinese_chars,
        strip_accents=rules.strip_accents, lowercase=rules.lowercase)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
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
