"""The vocab stage: WordPiece as BERT does it, loadable by transformers with the same ids."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter

import numpy as np
import pytest
from helpers.vocab_texts import (
    corpus_lines,
    save_source,
    source_tokens,
    word_lines,
    write_corpus,
    write_vocab_txt,
)

from bertcore.common.errors import BertError
from bertcore.data.vocab.config import AUTO_MIN_COUNT, AUTO_RANGE, VocabConfig
from bertcore.data.vocab.coverage import vocab_coverage
from bertcore.data.vocab.existing import load_source_vocabulary
from bertcore.data.vocab.files import (
    SPECIAL_TOKENS,
    load_tokenizer,
    read_vocab,
    save_vocab,
    vocab_fingerprint,
)
from bertcore.data.vocab.training import (
    _starting_alphabet,
    _trainer,
    auto_vocab_size,
    new_tokenizer,
    train_tokenizer,
)


def trained(tmp_path, **config) -> tuple:
    config = VocabConfig(**{"vocab_size": 300, "min_frequency": 1, **config})
    lines = corpus_lines()
    tokenizer = train_tokenizer([lines[i : i + 50] for i in range(0, len(lines), 50)], config)
    out = tmp_path / "vocab"
    out.mkdir()
    save_vocab(tokenizer, out)
    return tokenizer, out


def test_the_same_lines_train_the_same_vocabulary_byte_for_byte(tmp_path):
    """tokenizers' trainer numbers the starting characters in the order of a randomly seeded
    hash map and breaks ties between equal-count merges by those numbers: trained as it is,
    no two of these vocabularies would be equal. Six trainings in one process (so the hash
    seeds differ only where the trainer's do), three sizes: equal files every time."""
    lines = corpus_lines(seed=5)
    batches = [lines[i : i + 50] for i in range(0, len(lines), 50)]
    for size in (120, 300, 600):
        config = VocabConfig(vocab_size=size, min_frequency=1)
        files = set()
        for n in range(6):
            out = tmp_path / f"v{size}-{n}"
            out.mkdir()
            save_vocab(train_tokenizer(batches, config), out)
            files.add(tuple((out / name).read_bytes() for name in ("vocab.txt", "tokenizer.json")))
        assert len(files) == 1, f"vocab_size {size}: {len(files)} different vocabularies"
        tokens = files.pop()[0].decode().splitlines()
        assert tokens[:5] == list(SPECIAL_TOKENS) and len(tokens) == len(set(tokens))


@pytest.mark.parametrize("lowercase", [True, False])
def test_the_starting_alphabet_from_the_words_is_what_a_trainer_of_size_1_keeps(lowercase):
    """The first pass counts words instead of training: its alphabet is the one tokenizers'
    WordPiece trainer starts from (every character, `##x` for one that follows another in a
    word), here with accents, CJK, digits, punctuation and single-letter words."""
    config = VocabConfig(vocab_size=100, min_frequency=3, lowercase=lowercase)
    lines = [*corpus_lines(seed=2), "x 7 ½ a1b2 über-Ärger ##q [PAD] é.", "ﬁne ǅ İstanbul"]
    batches = [lines[i : i + 50] for i in range(0, len(lines), 50)]
    trained = new_tokenizer(config)
    trained.train_from_iterator(batches, trainer=_trainer(1, config, SPECIAL_TOKENS, False))
    expected = sorted(set(trained.get_vocab()) - set(SPECIAL_TOKENS))
    assert _starting_alphabet(batches, config) == expected
    assert "##b" in expected and "7" in expected  # continuations and characters


def test_training_refuses_lines_it_cannot_read_twice():
    with pytest.raises(TypeError, match="twice"):
        train_tokenizer(iter([corpus_lines()]), VocabConfig(vocab_size=100))


TEXTS = [
    "The quick brown fox jumps over a lazy dog.",
    "Café naïve résumé Über alles zzzq",
    "我们喜欢自然语言处理 and the dog 東京",
]


@pytest.mark.parametrize("lowercase", [True, False])
def test_transformers_gives_the_same_ids(tmp_path, lowercase):
    from transformers import BertTokenizerFast

    _, out = trained(tmp_path, lowercase=lowercase)
    ours = load_tokenizer(out)
    hf = BertTokenizerFast.from_pretrained(out)
    assert len(hf) == ours.get_vocab_size()
    assert [hf.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    for text in TEXTS:
        enc = ours.encode(text)
        assert hf(text)["input_ids"] == enc.ids
        assert enc.ids[0] == 2 and enc.ids[-1] == 3  # [CLS] ... [SEP]
    for a, b in itertools.pairwise(TEXTS):
        enc = ours.encode(a, b)
        got = hf(a, b)
        assert got["input_ids"] == enc.ids
        assert got["token_type_ids"] == enc.type_ids
        first_sep = enc.ids.index(3)
        assert enc.type_ids == [0] * (first_sep + 1) + [1] * (len(enc.ids) - first_sep - 1)
    # lowercase decides case and (strip_accents: null) accents, as in BERT
    tokens = ours.encode("Café", add_special_tokens=False).tokens
    assert "".join(t.removeprefix("##") for t in tokens) == ("cafe" if lowercase else "Café")


def test_cjk_characters_are_tokens_of_their_own(tmp_path):
    _, out = trained(tmp_path)
    tokens = load_tokenizer(out).encode("我们喜欢自然语言", add_special_tokens=False).tokens
    assert tokens == list("我们喜欢自然语言")


def test_vocab_files(tmp_path):
    tokenizer, out = trained(tmp_path)
    tokens = read_vocab(out)
    assert tokens[:5] == list(SPECIAL_TOKENS)
    assert len(tokens) == tokenizer.get_vocab_size() <= 300
    assert all(tokenizer.token_to_id(t) == i for i, t in enumerate(tokens))
    assert any(t.startswith("##") for t in tokens)
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is True and config["strip_accents"] is True
    assert len(vocab_fingerprint(out)) == 64
    smaller = VocabConfig(vocab_size=120, min_frequency=1)
    other = tmp_path / "other"
    other.mkdir()
    save_vocab(train_tokenizer([corpus_lines()], smaller), other)
    assert vocab_fingerprint(other) != vocab_fingerprint(out)


def test_tokenizer_and_vocab_txt_must_agree(tmp_path):
    _, out = trained(tmp_path)
    tokens = read_vocab(out)
    tokens[10], tokens[11] = tokens[11], tokens[10]
    (out / "vocab.txt").write_text("".join(t + "\n" for t in tokens), "utf-8")
    with pytest.raises(BertError, match="disagree"):
        load_tokenizer(out)


# --- vocab_size: auto ----------------------------------------------------------------------------


def test_auto_vocab_size_is_the_number_of_words_seen_five_times_within_the_range():
    def auto(lines):
        return auto_vocab_size([lines[i : i + 100] for i in range(0, len(lines), 100)],
                               VocabConfig())

    low, high = AUTO_RANGE
    # 700 words seen 5 times count; 300 seen 4 times, and the "." seen ~400 times... count too
    size, frequent = auto(word_lines(700, 5) + word_lines(300, 4, start=700, seed=1))
    assert (size, frequent) == (701, 701)  # 700 words and "."
    # more text with more words: more tokens (monotone in the corpus)
    size, frequent = auto(word_lines(700, 5) + word_lines(900, 6, start=700, seed=1))
    assert (size, frequent) == (1601, 1601)
    # "W3" and "w3" are one word under lowercase: 3 + 2 sightings = 5
    assert auto(["W3 W3 W3", "w3 w3"])[1] == 1
    # clamped: a tiny corpus still gets the lower bound, a huge one BERT's 30522
    assert auto(word_lines(50, 10)) == (low, 51)
    assert auto(word_lines(high + 500, 5)) == (high, high + 501)


@pytest.mark.parametrize("lowercase", [True, False])
def test_auto_vocab_size_counts_the_words_bert_splits(lowercase):
    """The count (by tokenizers' trainer) is of the words BERT's normaliser and pre-tokeniser
    give, one by one: casing and accents merged or not, punctuation and CJK characters apart,
    with counts on both sides of AUTO_MIN_COUNT."""
    words = []
    for i in range(300):
        words += [f"Wört{i}"] * (i % 4 + 1) + [f"wort{i}"] * (i % 3 + 1)  # one word lowercased
        words += [f"x{i}."] * (i % 7 + 1) + [f"東{i}"] * (i % 9 + 1)  # "x{i}" "."; "東" "{i}"
    random.Random(0).shuffle(words)
    lines = [" ".join(words[i : i + 9]) for i in range(0, len(words), 9)]
    config = VocabConfig(lowercase=lowercase)
    bert = new_tokenizer(config)
    counts = Counter(word for line in lines for word, _ in
                     bert.pre_tokenizer.pre_tokenize_str(bert.normalizer.normalize_str(line)))
    frequent = sum(count >= AUTO_MIN_COUNT for count in counts.values())
    assert 100 < frequent < len(counts) - 100
    assert auto_vocab_size([lines[i : i + 50] for i in range(0, len(lines), 50)],
                           config)[1] == frequent


# --- an existing vocabulary (vocab.source) ------------------------------------------------------

SOURCE_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Café naïve, THE DOG! zzqx?",
    "我们喜欢 the fox 東京",
    "a [MASK] here",
]


def from_source(tmp_path, source, out="out", **config):
    """data/vocab written from `source` as the vocab stage does; our tokenizer of it."""
    vocab = load_source_vocabulary(str(source), VocabConfig(source=str(source), **config))
    out = tmp_path / out
    out.mkdir()
    save_vocab(vocab.tokenizer, out)
    return out, load_tokenizer(out)


def read_vocab_of(hf_tokenizer) -> list[str]:
    vocab = hf_tokenizer.get_vocab()
    return sorted(vocab, key=vocab.__getitem__)


def assert_same_ids(ours, reference) -> None:
    """`ours` (tokenizers) and `reference` (a callable like transformers' tokenizer)."""
    for text in SOURCE_TEXTS:
        assert ours.encode(text).ids == reference(text)["input_ids"], text
    for a, b in itertools.pairwise(SOURCE_TEXTS):
        encoding, expected = ours.encode(a, b), reference(a, b)
        assert encoding.ids == expected["input_ids"], (a, b)
        assert encoding.type_ids == expected["token_type_ids"], (a, b)


@pytest.mark.parametrize("cased", [False, True, "config"], ids=["uncased", "cased", "config"])
def test_a_folder_saved_by_transformers_gives_its_ids(tmp_path, cased):
    """"config": tokenizer_config.json says cased, tokenizer.json's normaliser lowercases:
    transformers follows the config, and so do we."""
    from transformers import BertTokenizerFast

    source = save_source(tmp_path / "source", cased=cased is True)
    expected = {False: ["the", "cafe"], True: ["The", "Café"], "config": ["[UNK]", "[UNK]"]}
    expected = expected[cased]  # the last: cased rules on an uncased vocabulary
    if cased == "config":
        config_file = source / "tokenizer_config.json"
        config_file.write_text(json.dumps({**json.loads(config_file.read_text()),
                                           "do_lower_case": False}))
        cased = True
    out, ours = from_source(tmp_path, source)
    reference = BertTokenizerFast.from_pretrained(source)
    assert_same_ids(ours, reference)
    assert_same_ids(ours, BertTokenizerFast.from_pretrained(out))  # and data/vocab in transformers
    assert read_vocab(out) == read_vocab_of(reference)  # the source's ids, [CLS] = 4
    assert ours.encode("x").ids[0] == 4 and ours.encode("x").ids[-1] == 5
    words = ours.encode("The Café", add_special_tokens=False).tokens
    assert words == expected  # casing from the source
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is (not cased)


def test_a_bare_vocab_txt_and_a_tokenizer_json(tmp_path):
    from tokenizers import Tokenizer
    from transformers import BertTokenizerFast

    write_vocab_txt(tmp_path / "bare" / "vocab.txt", source_tokens(cased=False))
    reference = BertTokenizerFast.from_pretrained(tmp_path / "bare")  # a folder with vocab.txt
    out, ours = from_source(tmp_path, tmp_path / "bare" / "vocab.txt")
    assert_same_ids(ours, reference)
    assert read_vocab(out) == source_tokens(cased=False)
    # the older folder layout: vocab.txt + tokenizer_config.json (here cased)
    write_vocab_txt(tmp_path / "legacy" / "vocab.txt", source_tokens(cased=True))
    (tmp_path / "legacy" / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "BertTokenizer", "do_lower_case": False}))
    _, ours = from_source(tmp_path, tmp_path / "legacy", out="out_legacy")
    assert_same_ids(ours, BertTokenizerFast.from_pretrained(tmp_path / "legacy"))
    assert ours.encode("The", add_special_tokens=False).tokens == ["The"]

    save_source(tmp_path / "hf", cased=True)
    reference = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    truncating = Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    truncating.enable_truncation(max_length=6)  # as some saved tokenizers are: not for samples
    truncating.save(str(tmp_path / "truncating.json"))
    out, ours = from_source(tmp_path, tmp_path / "truncating.json", out="out_json")
    assert_same_ids(ours, lambda *texts: {"input_ids": reference.encode(*texts).ids,
                                          "token_type_ids": reference.encode(*texts).type_ids})
    assert ours.encode("The", add_special_tokens=False).tokens == ["The"]
    assert json.loads((out / "tokenizer.json").read_text())["truncation"] is None


def test_cjk_vocabulary_and_coverage(tmp_path):
    write_vocab_txt(tmp_path / "vocab.txt", source_tokens(cased=False))
    _, ours = from_source(tmp_path, tmp_path / "vocab.txt")
    assert ours.encode("我们喜欢東京", add_special_tokens=False).tokens == [
        "我", "们", "喜", "欢", "[UNK]", "[UNK]"]
    english = tmp_path / "english.txt"
    english.write_text("the quick brown fox jumps over the lazy dog.\n" * 20, encoding="utf-8")
    chinese = tmp_path / "chinese.txt"
    chinese.write_text("東京是日本的首都。北京是中国的首都。\n" * 20, encoding="utf-8")
    fits, does_not = vocab_coverage(ours, english), vocab_coverage(ours, chinese)
    assert fits["unk_rate"] == 0 and fits["words"] == 20 * 10 and fits["tokens"] == 20 * 11
    assert fits["tokens_per_word"] == 1.1  # jumps = jump ##s
    assert does_not["unk_rate"] > 0.8 and does_not["tokens_per_word"] == 1.0
    # a larger file is measured on windows spread through it: both halves are seen
    both = tmp_path / "both.txt"
    both.write_text(english.read_text() * 50 + chinese.read_text() * 50, encoding="utf-8")
    sampled = vocab_coverage(ours, both, max_bytes=4000)
    assert 3000 < sampled["sampled_bytes"] < 5000  # about max_bytes, in whole lines
    assert 0.2 < sampled["unk_rate"] < 0.8


def test_samples_use_the_source_ids_of_cls_and_sep(tmp_path):
    from bertcore.data.samples.build import build_samples
    from bertcore.data.samples.config import SamplesConfig
    from bertcore.data.samples.store import SampleStore
    from bertcore.training.data.masking import VocabSpec

    out, ours = from_source(tmp_path, save_source(tmp_path / "source"))
    corpus = tmp_path / "corpus"
    docs = [[f"the quick fox jumps over dog {w} ." for w in "abcdefgh"] for _ in range(4)]
    write_corpus(corpus, [line for doc in docs for line in doc])
    (corpus / "val.txt").write_text((corpus / "train.txt").read_text())
    samples = tmp_path / "samples"
    samples.mkdir()
    build_samples({s: corpus / f"{s}.txt" for s in ("train", "val")}, ours, samples,
                  SamplesConfig(max_seq_length=24, dupe_factor=1, workers=1),
                  vocab_fingerprint(out))
    store = SampleStore(samples / "train")
    for i in range(len(store)):
        ids, b_start, _ = store[i]
        assert ids[0] == 4 and ids[b_start - 1] == 5 and ids[-1] == 5  # [CLS], [SEP], [SEP]
        body = np.concatenate([ids[1 : b_start - 1], ids[b_start:-1]])
        assert not np.isin(body, [0, 1, 2, 3, 4, 5, 6]).any()  # specials only where they go
    spec = VocabSpec.from_tokens(read_vocab(out))
    assert (spec.cls_id, spec.sep_id, spec.mask_id, spec.num_special) == (4, 5, 6, 7)


