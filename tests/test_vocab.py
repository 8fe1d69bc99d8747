"""The vocab stage: WordPiece as BERT does it, loadable by transformers with the same ids."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from conftest import assert_one_line_error, run_bert

from bertcore.errors import BertError
from bertcore.vocab import (
    SPECIAL_TOKENS,
    VocabConfig,
    load_tokenizer,
    read_vocab,
    save_vocab,
    train_tokenizer,
    vocab_fingerprint,
)

PROSE = (
    "the quick brown fox jumps over a lazy dog while children play in the old park "
    "near river bank and birds sing songs about summer rain Café naïve résumé Über"
)
WORDS = PROSE.split()
CJK = ["我们喜欢自然语言处理。", "東京は日本の首都です。", "한국어 문장도 있습니다."]


def corpus_lines(seed: int = 0, n: int = 400) -> list[str]:
    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) + "." for _ in range(n)]
    return lines + CJK * 5


def write_corpus(folder, lines) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    docs = [lines[i : i + 5] for i in range(0, len(lines), 5)]
    (folder / "train.txt").write_text("\n\n".join("\n".join(d) for d in docs) + "\n", "utf-8")


def trained(tmp_path, **config) -> tuple:
    config = VocabConfig(**{"vocab_size": 300, "min_frequency": 1, **config})
    lines = corpus_lines()
    tokenizer = train_tokenizer([lines[i : i + 50] for i in range(0, len(lines), 50)], config)
    out = tmp_path / "vocab"
    out.mkdir()
    save_vocab(tokenizer, out, config)
    return tokenizer, out


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
    save_vocab(train_tokenizer([corpus_lines()], smaller), other, smaller)
    assert vocab_fingerprint(other) != vocab_fingerprint(out)


def test_tokenizer_and_vocab_txt_must_agree(tmp_path):
    _, out = trained(tmp_path)
    tokens = read_vocab(out)
    tokens[10], tokens[11] = tokens[11], tokens[10]
    (out / "vocab.txt").write_text("".join(t + "\n" for t in tokens), "utf-8")
    with pytest.raises(BertError, match="disagree"):
        load_tokenizer(out)


def test_cli_trains_and_keeps_the_previous_vocab_on_failure(tmp_path):
    write_corpus(tmp_path / "corpus", corpus_lines())
    proc = run_bert("vocab", "--set", "vocab.vocab_size=200", "--set", "vocab.min_frequency=1",
                    "--params", "none.yaml", cwd=tmp_path)
    assert_one_line_error(proc, "none.yaml")
    (tmp_path / "params.yaml").write_text("vocab:\n  vocab_size: 200\n  min_frequency: 1\n")
    run_bert("vocab", "--corpus", "corpus", "--out", "vocab", cwd=tmp_path, check=True)
    before = (tmp_path / "vocab" / "vocab.txt").read_bytes()
    assert before.splitlines()[:5] == [t.encode() for t in SPECIAL_TOKENS]

    proc = run_bert("vocab", "--corpus", "missing", "--out", "vocab", cwd=tmp_path)
    assert_one_line_error(proc, "missing", code=1)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "train.txt").write_text("\n\n  \n")
    proc = run_bert("vocab", "--corpus", "empty", "--out", "vocab", cwd=tmp_path)
    assert_one_line_error(proc, "no text", code=1)
    proc = run_bert("vocab", "--corpus", "corpus", "--out", "vocab",
                    "--set", "vocab.vocab_size=3", cwd=tmp_path)
    assert_one_line_error(proc, "vocab.vocab_size", code=2)
    assert (tmp_path / "vocab" / "vocab.txt").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "empty", "params.yaml", "vocab"]
