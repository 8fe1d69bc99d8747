"""The tokenizer a model is used with, checked to fit it: the model folder's own (an export, a
Hugging Face model), or, for a folder without one (`models/pretrained`, a checkpoint), the one
the user names. A tokenizer that does not fit turns text into ids the model reads as other
tokens, or into ids it has no embedding for: wrong answers and no error. So a BertError stops
a tokenizer that differs from the folder's own, that is not the vocabulary the model was
trained with (where the folder records it), or, named by the user, whose size or [PAD] id is
not the model's. A folder's own tokenizer may be smaller than its model (embeddings padded to
a round size, as some Hugging Face models have), never larger, nor under half its rows.

A tokenizer that fits the model may still not read the text a stage gives it (another
casing, another script): `require_readable` stops one that reads most of it as [UNK].
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer

from bertcore.common.errors import BertError
from bertcore.data.vocab.existing import SourceVocabulary, read_tokenizer
from bertcore.data.vocab.files import TOKENIZER_FILE, VOCAB_FILE, CasingRules, vocab_fingerprint
from bertcore.model.bert import BertConfig

# transformers' BertTokenizer defaults, for a bare vocab.txt without tokenizer_config.json
BERT_DEFAULT_RULES = CasingRules(lowercase=True, strip_accents=None)
_DEFAULTS_FROM = "BertTokenizer's defaults"

# transformers 5's BertTokenizerFast(vocab_file=...) ignores the file and saves a tokenizer of
# the 5 special tokens alone, which reads every word as [UNK]: the usual way to get one.
_FIVE_TOKENS_HINT = ("(transformers 5's BertTokenizerFast(vocab_file=...) makes one of 5 tokens: "
                     "save BertTokenizerFast.from_pretrained(DIR) instead)")
UNK = "[UNK]"
# WordPiece spells any word of its alphabet out of pieces and gives [UNK] only for a word with
# a character outside it: on text in the vocabulary's language that is a fraction of a percent
# (the pipeline's vocabulary on its own train split: 0 of 285,826 tokens, metrics/vocab.json).
# Half the text's tokens [UNK] means the tokenizer does not read the text at all (another
# casing, script or vocabulary), and every score on it is meaningless.
MAX_UNK_SHARE = 0.5


def has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in (TOKENIZER_FILE, VOCAB_FILE))


def require_own_tokenizer(model_dir: Path, key: str) -> None:
    """A model folder a param names (`key`: glue.model, probe.model), which no --vocab goes
    with, must hold its tokenizer; a folder that is missing is left to the loader."""
    if model_dir.is_dir() and not has_tokenizer(model_dir):
        raise BertError(f"{key}: {model_dir} has no tokenizer (tokenizer.json or vocab.txt): "
                        f"give a BERT folder with its own (`bert export` writes one), or set "
                        f"{key} to null for the pipeline's model and its vocabulary")


def model_tokenizer(model_dir: Path, vocab_dir: Path | None, config: BertConfig,
                    trained_with: str | None = None) -> Tokenizer:
    """The tokenizer for the model in `model_dir` (whose config is `config`).

    `vocab_dir` is for a model folder without a tokenizer; given for one that has its own, it
    must hold the same tokenizer. `trained_with`: the fingerprint of the vocabulary the model
    was trained with (`vocab_fingerprint`), when the folder records one."""
    own = has_tokenizer(model_dir)
    if vocab_dir is None and not own:
        raise BertError(f"no tokenizer (tokenizer.json or vocab.txt) in {model_dir}: export "
                        "with the vocab, or pass --vocab DIR")
    source = tokenizer_folder(model_dir, vocab_dir)
    chosen = _read(source, f"the model folder {model_dir}" if own else f"--vocab {vocab_dir}")
    if own and vocab_dir is not None:
        _require_same(chosen, _read(vocab_dir, f"--vocab {vocab_dir}"), model_dir, vocab_dir)
    if trained_with and (source / VOCAB_FILE).is_file():  # that decides
        if vocab_fingerprint(source) != trained_with:
            raise BertError(f"the model in {model_dir} was trained with another vocabulary "
                            f"than the one in {source} (their vocab.txt differ): use the "
                            "vocabulary it was trained with")
    elif not own:
        _require_same_size_and_pad(chosen.tokenizer, vocab_dir, model_dir, config)
    if own:  # (its tokenizer.json is read before its vocab.txt: it may not be the one trained)
        _require_covering(chosen.tokenizer, model_dir, config)
    return chosen.tokenizer


def tokenizer_folder(model_dir: Path, vocab_dir: Path | None) -> Path:
    """Where the tokenizer of the model in `model_dir` is read from: the folder's own, else
    `vocab_dir` (the folder named in messages about the tokenizer)."""
    return model_dir if has_tokenizer(model_dir) or vocab_dir is None else vocab_dir


def _read(folder: Path, what: str) -> SourceVocabulary:
    if not folder.is_dir():
        raise BertError(f"vocab directory not found: {folder}")
    return read_tokenizer(folder, BERT_DEFAULT_RULES, _DEFAULTS_FROM, what)


def _require_same(own: SourceVocabulary, given: SourceVocabulary, model_dir: Path,
                  vocab_dir: Path) -> None:
    """--vocab for a folder with its own tokenizer: the same tokens, ids and casing, or stop."""
    if own.tokenizer.get_vocab() == given.tokenizer.get_vocab() and (
            own.rules.lowercase, own.rules.strips_accents) == (
            given.rules.lowercase, given.rules.strips_accents):
        return
    raise BertError(f"{model_dir} has its own tokenizer ({own.tokenizer.get_vocab_size()} "
                    f"tokens, {own.rules.describe()}) and --vocab {vocab_dir} holds another "
                    f"({given.tokenizer.get_vocab_size()} tokens, {given.rules.describe()}): "
                    "leave out --vocab, which is for model folders without a tokenizer")


def _require_covering(tokenizer: Tokenizer, model_dir: Path, config: BertConfig) -> None:
    """A folder's own tokenizer: no more tokens than the model has rows, and at least half as
    many (padding a vocabulary to a multiple of m <= its size never doubles it; one far
    smaller leaves most of the model's tokens unreadable)."""
    size = tokenizer.get_vocab_size()
    if size > config.vocab_size:
        raise BertError(f"the tokenizer in {model_dir} has {size} tokens, its model only "
                        f"{config.vocab_size}: export the model with its own vocabulary")
    if 2 * size < config.vocab_size:
        raise BertError(f"the tokenizer in {model_dir} has {size} tokens, its model "
                        f"{config.vocab_size}: it does not cover the model's vocabulary "
                        f"{_FIVE_TOKENS_HINT}; put the tokenizer the model was trained with "
                        "there")


def _require_same_size_and_pad(tokenizer: Tokenizer, source: Path, model_dir: Path,
                               config: BertConfig) -> None:
    """A tokenizer the user names for a model: the model's size, [PAD] where it has it."""
    size = tokenizer.get_vocab_size()
    if size != config.vocab_size:
        raise BertError(f"the tokenizer in {source} has {size} tokens, the model in "
                        f"{model_dir} {config.vocab_size}: they do not belong together; use "
                        "the vocabulary the model was trained with")
    pad = tokenizer.token_to_id("[PAD]")
    if pad != config.pad_token_id:
        raise BertError(f"the tokenizer in {source} has [PAD] at id {pad}, the model in "
                        f"{model_dir} at {config.pad_token_id}: they do not belong together; "
                        "use the vocabulary the model was trained with")


def unknown_tokens(tokenizer: Tokenizer, encoded: Iterable[Sequence[int]]) -> tuple[int, int]:
    """([UNK] tokens, tokens) of encoded texts, the special tokens ([CLS], [SEP], [MASK],
    [PAD]) not counted."""
    unk_id = tokenizer.token_to_id(UNK)
    special = {tokenizer.token_to_id(token) for token in ("[CLS]", "[SEP]", "[MASK]", "[PAD]")}
    unknown = counted = 0
    for ids in encoded:
        kept = [i for i in ids if i not in special]
        counted += len(kept)
        unknown += kept.count(unk_id)
    return unknown, counted


def require_readable(unknown: int, counted: int, folder: str | Path, text: str) -> None:
    """Stop when the tokenizer of `folder` read more than MAX_UNK_SHARE of `text`'s `counted`
    tokens as [UNK] (`unknown` of them)."""
    if counted and unknown > MAX_UNK_SHARE * counted:
        raise BertError(f"the tokenizer in {folder} reads {unknown} of the {counted} tokens of "
                        f"{text} as [UNK] ({unknown / counted:.0%}): it does not read this "
                        "text; use the tokenizer the model was trained with, casing included")
