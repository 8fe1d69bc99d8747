"""Corpora of any size: a small folder, one book and two short documents run with the default
params (split by parts of documents); a corpus too small for NSP is a one-line error with the
right advice."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers.bert import REPO, assert_one_line_error, run_bert
from helpers.tiny_pretrain import ADJECTIVES, TOPICS, VERBS, tiny_params

from bertcore.common.errors import BertError
from bertcore.data.corpus.build import build_corpus
from bertcore.data.corpus.config import CorpusConfig
from bertcore.data.corpus.parts import neighbour_flags, plan_parts, read_parts
from bertcore.data.samples.build import _check_random_b_sources, build_samples
from bertcore.data.samples.config import SamplesConfig
from bertcore.data.samples.store import PHASE1_DIR, SampleStore
from bertcore.data.vocab.config import VocabConfig
from bertcore.data.vocab.files import load_tokenizer, save_vocab
from bertcore.data.vocab.training import train_tokenizer


def prose(n_sentences: int, seed: int, per_paragraph: int = 6) -> str:
    """Prose on one topic, every sentence unique (it carries its number), in paragraphs of
    `per_paragraph` sentences on one line each: a prose file, hence one document."""
    rng = random.Random(seed)
    words = TOPICS[sorted(TOPICS)[seed % len(TOPICS)]].split()
    sentences = []
    for i in range(n_sentences):
        a, b = rng.sample(words, 2)
        sentences.append(f"Line {seed}-{i} says the {rng.choice(ADJECTIVES)} {a} "
                         f"{rng.choice(VERBS)} the {b}.")
    paragraphs = [" ".join(sentences[i : i + per_paragraph])
                  for i in range(0, n_sentences, per_paragraph)]
    return "\n\n".join(paragraphs) + "\n"


def sentences_of(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line]


# --- the plan: how documents are cut and dealt out -------------------------------------------


def random_b_sources_exist(plan) -> bool:
    """Every part of two sentences or more has a part of its split outside its own document's
    neighbourhood (itself and the parts just before and after it)."""
    parts = [(d, p, split)
             for d, (sizes, splits) in enumerate(zip(plan.sizes, plan.splits, strict=True))
             for p, (n, split) in enumerate(zip(sizes, splits, strict=True)) if n >= 2]
    for d, p, split in parts:
        others = [(d2, p2) for d2, p2, s2 in parts
                  if s2 == split and not (d2 == d and abs(p2 - p) <= 1)]
        if not others:
            return False
    return True


def test_one_book_is_cut_into_parts_and_val_parts_are_spread():
    plan = plan_parts([1400], [0], val_fraction=0.1, seed=12345)
    assert plan.part_sentences == 14 and plan.parts == 100 and plan.documents_cut == 1
    (sizes,), (splits,) = plan.sizes, plan.splits
    assert sum(sizes) == 1400 and min(sizes) >= 14 and max(sizes) <= 27
    val = [i for i, s in enumerate(splits) if s == 1]
    assert len(val) == 10 and min(np.diff(val)) >= 2  # spread: no two val parts adjacent
    other_seed = plan_parts([1400], [0], val_fraction=0.1, seed=1)
    assert [i for i, s in enumerate(other_seed.splits[0]) if s] != val
    # a small val_fraction does not cut the book into crumbs: parts of 8, val about 1%
    small = plan_parts([2000], [0], val_fraction=0.01, seed=12345)
    assert small.part_sentences == 8 and small.parts == 250
    assert sum(small.splits[0]) in (2, 3)


@pytest.mark.parametrize("val_fraction", [0.02, 0.05, 0.1, 0.2, 0.3, 0.5])
def test_every_part_has_a_random_b_source_whatever_the_size(val_fraction):
    for sentences in [[8], [9], [13], [30], [4, 4], [5, 4], [2, 2, 2, 2], [1, 8, 1], [57],
                      [3, 40, 2, 6], [200], [12] * 7]:
        plan = plan_parts(sentences, [0] * len(sentences), val_fraction, seed=7)
        assert plan is not None, sentences
        flat = [s for splits in plan.splits for s in splits]
        assert flat.count(1) >= 2 and flat.count(0) >= 2
        assert [sum(sizes) for sizes in plan.sizes] == sentences
        assert random_b_sources_exist(plan), (sentences, plan)


def test_too_little_text_gives_no_plan():
    for sentences in ([3], [7], [3, 3], [5, 3], [1, 1, 1, 1, 1], [2, 2, 3]):
        assert plan_parts(sentences, [0] * len(sentences), 0.1, seed=7) is None, sentences


def test_one_sentence_documents_keep_their_split():
    plan = plan_parts([1, 20, 1], [1, 0, 0], 0.1, seed=3)
    assert plan.sizes[0] == [1] and plan.splits[0] == [1]
    assert plan.sizes[2] == [1] and plan.splits[2] == [0]


# --- the corpus stage ------------------------------------------------------------------------


def test_book_split_by_parts_shares_no_text_and_parts_rebuild_it(tmp_path):
    (tmp_path / "book.txt").write_text(prose(1400, seed=1), encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    stats = build_corpus(CorpusConfig(source=str(tmp_path / "book.txt"), val_fraction=0.1),
                         out, progress=False)
    assert stats.documents == 1 and stats.sentences == 1400
    assert stats.split == {"by": "parts", "part_sentences": 14, "documents_cut": 1,
                           "parts": 100, "train_parts": 90, "val_parts": 10}
    train, val = sentences_of(out / "train.txt"), sentences_of(out / "val.txt")
    assert len(train) + len(val) == 1400 and not set(train) & set(val)
    parts = read_parts(out)
    assert parts["split_by"] == "parts" and parts["requested"] == "auto"
    # parts.json names each block: put back in order, they are the book
    blocks = {}
    for split in ("train", "val"):
        text = (out / f"{split}.txt").read_text(encoding="utf-8")
        for (doc, part), block in zip(parts[split], text.strip("\n").split("\n\n"), strict=True):
            blocks[doc, part] = block.split("\n")
    book = [s for key in sorted(blocks) for s in blocks[key]]
    assert [s.split(" says")[0] for s in book] == [f"Line 1-{i}" for i in range(1400)]
    assert sorted(blocks) == [(0, p) for p in range(100)]
    # whole documents on request: then the book is one document, in train
    again = tmp_path / "again"
    again.mkdir()
    stats = build_corpus(CorpusConfig(source=str(tmp_path / "book.txt"), split_by="documents"),
                         again, progress=False)
    assert (stats.train.documents, stats.val.documents) == (1, 0)
    assert read_parts(again)["split_by"] == "documents"


def test_many_documents_stay_whole(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(150):
        (folder / f"{i:03d}.txt").write_text(prose(4, seed=i))
    out = tmp_path / "out"
    out.mkdir()
    stats = build_corpus(CorpusConfig(source=str(folder), val_fraction=0.1), out,
                         progress=False)
    assert stats.split == {"by": "documents"} and stats.train.documents + stats.val.documents == 150
    assert stats.val.documents >= 10


# --- the samples stage: random Bs from parts ------------------------------------------------

MARKERS = ["apple", "brick", "cloud", "dune", "eagle", "fern", "grape", "harbor", "island",
           "jungle", "kettle", "lemon", "mango", "nickel", "olive", "pepper"]


def test_random_b_check_counts_parts_past_255(tmp_path):
    """The check that every part has a random-B source beyond its neighbours counts in ints:
    with 300 parts (> 255, the range of the uint8 neighbour flags) it passes; with three parts
    of one document the middle one has none and the user is told so."""
    many = 300
    documents = np.arange(0, 2 * many + 1, 2, dtype=np.int64)[:, None]  # 2 sentences each
    flags = neighbour_flags([[0, p] for p in range(many)], np.arange(many))
    assert flags[1] == 3
    _check_random_b_sources(tmp_path / "train.txt", documents, flags)
    flags = neighbour_flags([[0, 0], [0, 1], [0, 2]], np.arange(3))
    with pytest.raises(BertError, match="part 1 has no other part"):
        _check_random_b_sources(tmp_path / "train.txt", documents[:4], flags)


def test_random_b_never_comes_from_its_own_or_a_neighbouring_part(tmp_path):
    """Two documents of six parts in train (two more parts in val); every sentence of part i
    is made of its own marker word, so a B's tokens tell which part it came from."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    keys = {"train": [(d, p) for d in range(2) for p in range(6)], "val": [(2, 0), (2, 2)]}
    marker = {key: MARKERS[i] for i, key in enumerate(keys["train"] + keys["val"])}
    for split, blocks in keys.items():
        text = "\n\n".join("\n".join(" ".join([marker[key]] * (2 + s % 3)) for s in range(5))
                           for key in blocks)
        (corpus / f"{split}.txt").write_text(text + "\n")
    parts = {"split_by": "parts", "requested": "auto", "part_sentences": 5,
             "train": [list(k) for k in keys["train"]], "val": [list(k) for k in keys["val"]]}
    (corpus / "parts.json").write_text(json.dumps(parts))
    config = VocabConfig(vocab_size=200, min_frequency=1)
    tokenizer = train_tokenizer([sentences_of(corpus / "train.txt") + MARKERS], config)
    vocab = tmp_path / "vocab"
    vocab.mkdir()
    save_vocab(tokenizer, vocab)
    tokenizer = load_tokenizer(vocab)
    key_of = {tokenizer.token_to_id(m): key for key, m in marker.items()}
    assert None not in key_of  # every marker is one token

    outs = {}
    for workers in (1, 2):
        outs[workers] = tmp_path / f"samples{workers}"
        outs[workers].mkdir()
        meta = build_samples({s: corpus / f"{s}.txt" for s in ("train", "val")}, tokenizer,
                             outs[workers], SamplesConfig(max_seq_length=24, dupe_factor=8,
                                                          workers=workers),
                             "fingerprint", parts=read_parts(corpus))[PHASE1_DIR]
    for path in sorted(outs[1].rglob("*.*")):
        assert path.read_bytes() == (outs[2] / path.relative_to(outs[1])).read_bytes(), path
    assert meta["train"]["split_by"] == "parts"
    store = SampleStore(outs[1] / "train")
    random_sources = set()
    for i in range(len(store)):
        ids, b_start, is_random = store[i]
        (a_key,) = {key_of[t] for t in ids[1 : b_start - 1].tolist() if t in key_of}
        (b_key,) = {key_of[t] for t in ids[b_start:-1].tolist() if t in key_of}
        if is_random:
            assert b_key[0] != a_key[0] or abs(b_key[1] - a_key[1]) >= 2, (a_key, b_key)
            random_sources.add((a_key, b_key))
        else:
            assert b_key == a_key
    assert len(random_sources) > 40  # many pairs of parts, the same document's far parts among them
    assert any(a[0] == b[0] for a, b in random_sources)


# --- the stages with default params, as a user runs them ---------------------------------------


def default_params(source: str) -> dict:
    """The shipped params.yaml with only corpus.source changed, plus a tiny model and a few
    steps for pretrain, evaluate and export (which are not what these tests are about)."""
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params["corpus"]["source"] = source
    tiny = tiny_params(train={"max_steps": 2, "batch_size": 8, "eval_every": 0,
                              "checkpoint_every": 0, "log_every": 1},
                       tracking={"enabled": False})
    tiny["model"]["max_position_embeddings"] = params["samples"]["max_seq_length"]
    for section in ("model", "masking", "train", "eval", "tracking"):
        params[section] = {**(params.get(section) or {}), **tiny[section]}
    params["model"]["recipe"] = "none"  # the shipped one is BERT-tiny's, not this tiny model's
    return params


def run_all_stages(workdir: Path, source: str) -> dict:
    (workdir / "params.yaml").write_text(yaml.safe_dump(default_params(source), sort_keys=False))
    for stage in ("corpus", "vocab", "samples", "pretrain", "evaluate", "export"):
        run_bert(stage, cwd=workdir, check=True)
    assert (workdir / "models" / "hf" / "model.safetensors").is_file()
    assert json.loads((workdir / "metrics" / "eval.json").read_text())["eval"]["nsp_accuracy"] >= 0
    return {name: json.loads((workdir / "metrics" / f"{name}.json").read_text())
            for name in ("corpus", "samples")}


def test_fourteen_files_with_default_params_run_all_stages(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    for i in range(14):
        (folder / f"chapter{i:02d}.txt").write_text(prose(60, seed=i), encoding="utf-8")
    metrics = run_all_stages(tmp_path, str(folder))
    corpus, samples = metrics["corpus"], metrics["samples"]
    assert corpus["documents"] == 14 and corpus["split"]["by"] == "parts"
    assert corpus["split"]["documents_cut"] == 14 and corpus["val"]["documents"] >= 8
    for split in ("train", "val"):
        assert samples[split]["split_by"] == "parts" and samples[split]["count"] > 0
    assert abs(samples["train"]["nsp_random_fraction"] - 0.5) < 0.02


def test_one_book_with_default_params_runs_all_stages(tmp_path):
    (tmp_path / "book.txt").write_text(prose(1400, seed=3), encoding="utf-8")
    metrics = run_all_stages(tmp_path, "book.txt")
    corpus, samples = metrics["corpus"], metrics["samples"]
    assert corpus["documents"] == 1 and corpus["split"]["parts"] == 100
    assert (corpus["train"]["documents"], corpus["val"]["documents"]) == (90, 10)
    assert samples["train"]["count"] > 1000 and samples["val"]["count"] > 20
    assert abs(samples["train"]["nsp_random_fraction"] - 0.5) < 0.02


def test_two_short_documents(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text(prose(4, seed=1))
    (tmp_path / "src" / "b.txt").write_text(prose(4, seed=2))
    (tmp_path / "params.yaml").write_text(
        yaml.safe_dump(default_params("src"), sort_keys=False))
    for stage in ("corpus", "vocab", "samples"):
        proc = run_bert(stage, cwd=tmp_path, check=True)
        assert "WARNING" not in proc.stderr, proc.stderr
    train = sentences_of(tmp_path / "data/corpus/train.txt")
    val = sentences_of(tmp_path / "data/corpus/val.txt")
    assert len(train) == len(val) == 4 and not set(train) & set(val)
    samples = json.loads((tmp_path / "metrics" / "samples.json").read_text())
    assert samples["train"]["count"] > 0 and samples["val"]["count"] > 0


def test_three_sentences_warn_then_fail_in_one_line_with_the_right_advice(tmp_path):
    (tmp_path / "notes.txt").write_text("The cat sat down. It was warm there. Then it left.\n")
    (tmp_path / "params.yaml").write_text(
        yaml.safe_dump(default_params("notes.txt"), sort_keys=False))
    corpus = run_bert("corpus", cwd=tmp_path, check=True)
    (warning,) = [line for line in corpus.stderr.splitlines() if "WARNING" in line]
    assert "too small for NSP" in warning and "add text" in warning
    run_bert("vocab", cwd=tmp_path, check=True)
    proc = run_bert("samples", cwd=tmp_path)
    assert_one_line_error(proc, "3 sentences", "add text to corpus.source", code=1)
    assert "val_fraction" not in proc.stderr and "blank line" not in proc.stderr
    # documents kept whole by request: the advice is to let them be cut
    proc = run_bert("corpus", "--set", "corpus.split_by=documents", cwd=tmp_path, check=True)
    assert "corpus.split_by: auto" in proc.stderr


def test_parts_that_leave_no_random_b_source_are_a_one_line_error(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    block = "\n".join(["apple brick cloud", "dune eagle fern", "grape harbor island"])
    for split in ("train", "val"):
        (corpus / f"{split}.txt").write_text(f"{block}\n\n{block}\n")
    parts = {"split_by": "parts", "requested": "auto", "part_sentences": 3,
             "train": [[0, 0], [0, 1]], "val": [[0, 3], [0, 5]]}  # train: two neighbours
    (corpus / "parts.json").write_text(json.dumps(parts))
    (tmp_path / "params.yaml").write_text("samples:\n  workers: 1\n")
    config = VocabConfig(vocab_size=60, min_frequency=1)
    (tmp_path / "vocab").mkdir()
    save_vocab(train_tokenizer([block.split("\n")], config), tmp_path / "vocab")
    proc = run_bert("samples", "--corpus", "corpus", "--vocab", "vocab", cwd=tmp_path)
    assert_one_line_error(proc, "train.txt", "no other part to draw a random B from", code=1)
    parts["train"] = [[0, 0]]  # fewer entries than blocks
    (corpus / "parts.json").write_text(json.dumps(parts))
    proc = run_bert("samples", "--corpus", "corpus", "--vocab", "vocab", cwd=tmp_path)
    assert_one_line_error(proc, "does not match the parts.json", code=1)
    (corpus / "parts.json").write_text("{not json")
    proc = run_bert("samples", "--corpus", "corpus", "--vocab", "vocab", cwd=tmp_path)
    assert_one_line_error(proc, "parts.json is damaged", code=1)
