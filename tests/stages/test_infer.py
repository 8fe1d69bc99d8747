"""`bert fill-mask` and `bert nsp` on a tiny model trained here for a few steps, exported, and
on the same weights saved by transformers (vocab.txt only), plus the one-line errors."""

from __future__ import annotations

import json
import random
import re
import shutil
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner
from helpers.bert import assert_one_line_error, run_bert

from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.files import save_vocab
from bertcore.data.vocab.training import train_tokenizer
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.saved.hf import export_hf
from bertstages.cli import cli

DOCUMENT = [
    "paris is the capital of france.",
    "berlin is the capital of germany.",
    "the cat sat on the mat.",
    "the dog slept on the rug.",
    "rome is the capital of italy.",
    "the bird sang in the tree.",
]


def training_batch(tokenizer, rng: random.Random):
    """Sentence pairs (next or random) with one masked word each, as MLM + NSP labels."""
    cls, sep, mask, pad = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[MASK]", "[PAD]"))
    rows, types, labels, nsp = [], [], [], []
    for i in range(len(DOCUMENT) - 1):
        for is_random in (0, 1):
            b = rng.choice([s for s in DOCUMENT if s != DOCUMENT[i + 1]]) if is_random else None
            a_ids = tokenizer.encode(DOCUMENT[i], add_special_tokens=False).ids
            b_ids = tokenizer.encode(b or DOCUMENT[i + 1], add_special_tokens=False).ids
            ids = [cls, *a_ids, sep, *b_ids, sep]
            label = [-100] * len(ids)
            for position in rng.sample(range(1, len(a_ids) + 1), 2):
                label[position], ids[position] = ids[position], mask
            rows.append(ids)
            labels.append(label)
            types.append([0] * (len(a_ids) + 2) + [1] * (len(b_ids) + 1))
            nsp.append(is_random)
    width = max(map(len, rows))
    pad_to = lambda rs, v: torch.tensor([r + [v] * (width - len(r)) for r in rs])  # noqa: E731
    return dict(
        input_ids=pad_to(rows, pad),
        token_type_ids=pad_to(types, 0),
        attention_mask=pad_to([[1] * len(r) for r in rows], 0),
        mlm_labels=pad_to(labels, -100),
        nsp_labels=torch.tensor(nsp),
    )


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    """A tiny BERT trained 300 AdamW steps on DOCUMENT, exported with its vocab."""
    root = tmp_path_factory.mktemp("infer")
    vocab_config = VocabConfig(vocab_size=80, min_frequency=1)
    tokenizer = train_tokenizer([DOCUMENT], vocab_config)
    vocab_dir = root / "vocab"
    vocab_dir.mkdir()
    save_vocab(tokenizer, vocab_dir)

    torch.manual_seed(0)
    rng = random.Random(0)
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertPretrainingModel(config)
    optimizer = torch.optim.AdamW(model.param_groups(0.01), lr=3e-3)
    for _ in range(300):
        model(**training_batch(tokenizer, rng)).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    export_hf(model.eval(), root / "hf", vocab_dir=vocab_dir)
    return root / "hf"


def bert_here(*args: str, check: bool = False) -> SimpleNamespace:
    """`bert ARGS` through the same click group, in this process (no torch import per call)."""
    result = CliRunner().invoke(cli, list(args))
    if check and result.exit_code != 0:
        raise AssertionError(f"bert {args} failed: {result.stderr}") from result.exception
    return SimpleNamespace(returncode=result.exit_code, stdout=result.stdout, stderr=result.stderr)


def predictions(stdout: str) -> list[tuple[float, str]]:
    return [(float(p), tok) for p, tok in re.findall(r"^  (\d\.\d{4})  (\S+)$", stdout, re.M)]


def nsp_probability(stdout: str) -> float:
    return float(re.search(r"P\(B follows A\) = (\d\.\d{4})", stdout).group(1))


def test_fill_mask_and_nsp_on_our_export(export_dir, tmp_path):
    proc = run_bert(
        "fill-mask", "--model", str(export_dir), "berlin is the [MASK] of germany.",
        "--top-k", "3", cwd=tmp_path, check=True,
    )  # fmt: skip
    found = predictions(proc.stdout)
    assert "[MASK] 1 of 1:" in proc.stdout and len(found) == 3
    assert found[0][1] == "capital" and found[0][0] > 0.5, proc.stdout  # learnt in training
    assert found[0][0] >= found[1][0] >= found[2][0] >= 0

    two = bert_here("fill-mask", "--model", str(export_dir), "[MASK] is the capital of [MASK].")
    assert "[MASK] 1 of 2:" in two.stdout and "[MASK] 2 of 2:" in two.stdout
    assert len(predictions(two.stdout)) == 10  # --top-k defaults to 5

    follows = run_bert(
        "nsp", "--model", str(export_dir), "paris is the capital of france.",
        "berlin is the capital of germany.", cwd=tmp_path, check=True,
    )  # fmt: skip
    random_b = bert_here(
        "nsp", "--model", str(export_dir), "paris is the capital of france.",
        "the bird sang in the tree.", check=True,
    )  # fmt: skip
    assert nsp_probability(follows.stdout) > 0.5 > nsp_probability(random_b.stdout)


def test_same_answers_from_a_transformers_dir_with_only_vocab_txt(export_dir, tmp_path):
    transformers = pytest.importorskip("transformers")
    hf_dir = tmp_path / "bert-from-transformers"
    transformers.BertForPreTraining.from_pretrained(export_dir).save_pretrained(hf_dir)
    for name in ("vocab.txt", "tokenizer_config.json"):  # no tokenizer.json: the fallback
        shutil.copy(export_dir / name, hf_dir / name)
    text = "berlin is the [MASK] of germany."
    ours = bert_here("fill-mask", "--model", str(export_dir), text, check=True)
    theirs = bert_here("fill-mask", "--model", str(hf_dir), text, check=True)
    assert predictions(theirs.stdout) == predictions(ours.stdout)


def test_long_text_is_truncated_with_a_notice(export_dir, tmp_path):
    text = "the [MASK] sat on the mat. " + "the dog slept on the rug. " * 10
    proc = bert_here("fill-mask", "--model", str(export_dir), text, check=True)
    assert "Notice:" in proc.stderr and "truncated" in proc.stderr
    assert len(predictions(proc.stdout)) == 5
    proc = bert_here("nsp", "--model", str(export_dir), text, text, check=True)
    assert "truncated" in proc.stderr and 0 <= nsp_probability(proc.stdout) <= 1


def test_one_line_errors(export_dir, tmp_path):
    proc = bert_here("fill-mask", "--model", str(tmp_path / "missing"), "a [MASK].")
    assert_one_line_error(proc, "model directory not found")

    no_weights = tmp_path / "no_weights"
    shutil.copytree(export_dir, no_weights)
    (no_weights / "model.safetensors").unlink()
    proc = bert_here("nsp", "--model", str(no_weights), "a.", "b.")
    assert_one_line_error(proc, "no model weights", str(no_weights))

    no_tokenizer = tmp_path / "no_tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(export_dir / name, no_tokenizer / name)
    proc = bert_here("fill-mask", "--model", str(no_tokenizer), "a [MASK].")
    assert_one_line_error(proc, "no tokenizer", "--vocab")

    proc = bert_here("fill-mask", "--model", str(export_dir), "no mask here.")
    assert_one_line_error(proc, "no [MASK]")

    text = "the dog slept on the rug. " * 10 + "the [MASK] sat."
    proc = bert_here("fill-mask", "--model", str(export_dir), text)
    assert_one_line_error(proc, "[MASK]", "beyond")


def test_empty_sentences_are_one_line(export_dir, tmp_path):
    proc = run_bert("nsp", "--model", str(export_dir), "", "", cwd=tmp_path)
    assert_one_line_error(proc, "SENTENCE_A and SENTENCE_B are empty", "give two sentences")
    assert "P(B follows A)" not in proc.stdout
    proc = bert_here("nsp", "--model", str(export_dir), "paris is the capital.", "   ")
    assert_one_line_error(proc, "SENTENCE_B is empty")
    proc = bert_here("fill-mask", "--model", str(export_dir), "")
    assert_one_line_error(proc, "no [MASK]")


def other_vocab(folder, sentences: list[str], size: int):
    """A vocabulary trained on other text: another size, other ids."""
    config = VocabConfig(vocab_size=size, min_frequency=1)
    folder.mkdir()
    save_vocab(train_tokenizer([sentences], config), folder)
    return folder


def test_a_vocab_that_does_not_fit_the_model_is_one_line(export_dir, tmp_path):
    """--vocab is for model folders without a tokenizer; one that is not the model's gives
    wrong tokens (or none) for the model's ids, with no error: it must stop."""
    small = other_vocab(tmp_path / "small", ["a tiny corpus about cats and mats."] * 3, 40)
    text = "berlin is the [MASK] of germany."
    # the folder's own tokenizer and another one: a conflict, said so
    proc = bert_here("fill-mask", "--model", str(export_dir), "--vocab", str(small), text)
    assert_one_line_error(proc, f"{export_dir} has its own tokenizer", "leave out --vocab")
    assert not predictions(proc.stdout)
    # the same tokenizer as the folder's own is no conflict
    same = tmp_path / "same"
    shutil.copytree(export_dir, same, ignore=shutil.ignore_patterns("model.safetensors",
                                                                    "config.json"))
    proc = bert_here("fill-mask", "--model", str(export_dir), "--vocab", str(same), text,
                     check=True)
    assert predictions(proc.stdout)[0][1] == "capital"

    bare = tmp_path / "bare"  # a model folder without a tokenizer (a Hugging Face save)
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(export_dir / name, bare / name)
    model_size = len((export_dir / "vocab.txt").read_text(encoding="utf-8").splitlines())
    for command in (("fill-mask", text), ("nsp", "the cat sat.", "the dog slept.")):
        proc = bert_here(command[0], "--model", str(bare), "--vocab", str(small), *command[1:])
        assert_one_line_error(proc, f"the tokenizer in {small} has 40 tokens",
                              f"the model in {bare} {model_size}")
        assert "P(B follows A)" not in proc.stdout and not predictions(proc.stdout)

    # the model's size but [PAD] elsewhere: ids the model pads with mean another token
    moved = tmp_path / "moved"
    moved.mkdir()
    tokens = (export_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokens[0], tokens[-1] = tokens[-1], tokens[0]
    (moved / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    proc = bert_here("fill-mask", "--model", str(bare), "--vocab", str(moved), text)
    assert_one_line_error(proc, f"has [PAD] at id {model_size - 1}", "at 0")


def test_a_model_padded_past_its_own_tokenizer_predicts_only_tokens(export_dir, tmp_path):
    """Some Hugging Face models pad their embeddings to a round size, past their tokenizer:
    that fits (the ids past it are never predicted); a tokenizer past the model does not."""
    transformers = pytest.importorskip("transformers")
    padded = tmp_path / "padded"
    model = transformers.BertForPreTraining.from_pretrained(export_dir)
    size = model.config.vocab_size
    model.resize_token_embeddings(size + 8)
    model.save_pretrained(padded)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(export_dir / name, padded / name)
    proc = bert_here("fill-mask", "--model", str(padded), "berlin is the [MASK] of germany.",
                     "--top-k", "20", check=True)
    assert len(predictions(proc.stdout)) == 20 and "None" not in proc.stdout

    larger = tmp_path / "larger"  # a tokenizer of more tokens than the model has rows
    shutil.copytree(export_dir, larger)
    tokens = (larger / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (larger / "tokenizer.json").unlink()
    (larger / "vocab.txt").write_text("\n".join([*tokens, "extra"]) + "\n", encoding="utf-8")
    proc = bert_here("fill-mask", "--model", str(larger), "berlin is the [MASK] of germany.")
    assert_one_line_error(proc, f"has {size + 1} tokens, its model only {size}")


def test_the_pipelines_export_is_the_default_model(export_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proc = bert_here("fill-mask", "berlin is the [MASK] of germany.")
    assert_one_line_error(proc, "no model in models/hf, the pipeline's export: run `dvc repro "
                          "export`, or pass --model DIR")
    (tmp_path / "models").mkdir()
    shutil.copytree(export_dir, tmp_path / "models" / "hf")
    text = "berlin is the [MASK] of germany."
    given = bert_here("fill-mask", "--model", str(export_dir), text, check=True)
    assert bert_here("fill-mask", text, check=True).stdout == given.stdout
    pair = ("paris is the capital of france.", "the bird sang in the tree.")
    given = bert_here("nsp", "--model", str(export_dir), *pair, check=True)
    assert bert_here("nsp", *pair, check=True).stdout == given.stdout


def test_a_tokenizer_that_does_not_cover_the_model_is_one_line(export_dir, tmp_path):
    """transformers 5's BertTokenizerFast(vocab_file=...) ignores the file: saved beside the
    model, its 5 special tokens read every word as [UNK], and the answers are noise."""
    transformers = pytest.importorskip("transformers")
    five = tmp_path / "five"
    shutil.copytree(export_dir, five, ignore=shutil.ignore_patterns("vocab.txt",
                                                                    "tokenizer*.json"))
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(export_dir / "vocab.txt"))
    tokenizer.save_pretrained(five)
    assert len(tokenizer) == 5
    size = len((export_dir / "vocab.txt").read_text(encoding="utf-8").splitlines())
    for command in (("fill-mask", "berlin is the [MASK] of germany."),
                    ("nsp", "the cat sat.", "the dog slept.")):
        proc = bert_here(command[0], "--model", str(five), *command[1:])
        assert_one_line_error(proc, f"the tokenizer in {five} has 5 tokens, its model {size}",
                              "does not cover", "BertTokenizerFast.from_pretrained")
        assert not predictions(proc.stdout) and "P(B follows A)" not in proc.stdout


def test_a_tokenizer_that_reads_the_text_as_unk_is_one_line(export_dir, tmp_path):
    """The model's own tokens with another casing (tokenizer_config.json says cased, the
    vocabulary is lower-case): capitals are [UNK], so a text in capitals is read as nothing."""
    cased = tmp_path / "cased"
    shutil.copytree(export_dir, cased)
    settings = json.loads((cased / "tokenizer_config.json").read_text(encoding="utf-8"))
    (cased / "tokenizer_config.json").write_text(
        json.dumps({**settings, "do_lower_case": False}), encoding="utf-8")
    shouted = "BERLIN IS THE [MASK] OF GERMANY."
    proc = bert_here("fill-mask", "--model", str(cased), shouted)
    assert_one_line_error(proc, f"the tokenizer in {cased} reads 5 of the 6 tokens of the "
                          "text as [UNK] (83%)", "casing")
    assert not predictions(proc.stdout)
    proc = bert_here("nsp", "--model", str(cased), "THE CAT SAT.", "THE DOG SLEPT.")
    assert_one_line_error(proc, "of the two sentences as [UNK]")
    # the same tokenizer on text it reads, and a text with one unknown word of five
    proc = bert_here("fill-mask", "--model", str(cased), "berlin is the [MASK] of germany.",
                     check=True)
    assert predictions(proc.stdout)[0][1] == "capital"
    bert_here("fill-mask", "--model", str(cased), "Berlin is the [MASK] of germany.",
              check=True)
