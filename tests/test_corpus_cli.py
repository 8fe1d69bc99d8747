"""`bert corpus` as a user runs it: outputs, metrics, and one-line errors for bad input."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, assert_one_line_error, run_bert


def corpus(tmp_path: Path, *args: str, **params):
    """Run `bert corpus` in tmp_path with a params.yaml holding `params` as its corpus section."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"corpus": params}))
    return run_bert("corpus", *args, cwd=tmp_path)


def metrics(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "metrics" / "corpus.json").read_text())


def test_writes_split_corpus_and_metrics(tmp_path):
    docs = [f"Document {i} starts here.\nIt has <b>two</b> sentences." for i in range(20)]
    (tmp_path / "raw.txt").write_text("\n\n".join([*docs, docs[0]]) + "\n", encoding="utf-8")
    proc = corpus(tmp_path, "--set", "corpus.val_fraction=0.25", source="raw.txt", format="lines")
    assert proc.returncode == 0, proc.stderr
    train = (tmp_path / "data/corpus/train.txt").read_text(encoding="utf-8")
    val = (tmp_path / "data/corpus/val.txt").read_text(encoding="utf-8")
    found = metrics(tmp_path)
    assert found["documents"] == 20 and found["sentences"] == 40
    assert found["train"]["documents"] + found["val"]["documents"] == 20
    assert found["val"]["documents"] == val.count("\n\n") + 1 >= 1
    assert found["dropped"]["duplicate_documents"] == 1
    assert found["cleaning"]["html_tags_removed"] == 42
    assert "Document 0 starts here.\nIt has two sentences.\n" in train + val
    assert "corpus: 20 documents" in proc.stderr


def test_failed_run_keeps_the_previous_output(tmp_path):
    (tmp_path / "raw.txt").write_text("One doc here.\n\nAnother doc there.\n")
    assert corpus(tmp_path, source="raw.txt").returncode == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "data/corpus").iterdir()}
    before_metrics = metrics(tmp_path)
    proc = corpus(tmp_path, source="gone.txt")
    assert_one_line_error(proc, "not found", "gone.txt", code=1)
    after = {p.name: p.read_bytes() for p in (tmp_path / "data/corpus").iterdir()}
    assert after == before and metrics(tmp_path) == before_metrics
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["corpus"]  # no leftovers


def test_custom_out_and_metrics_paths(tmp_path):
    (tmp_path / "raw.txt").write_text("Only one document. With two sentences.\n")
    proc = corpus(tmp_path, "--out", "c", "--metrics", "m.json", source="raw.txt")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "c/train.txt").read_text() == "Only one document.\nWith two sentences.\n"
    assert (tmp_path / "c/val.txt").read_text() == ""
    assert json.loads((tmp_path / "m.json").read_text())["val"]["documents"] == 0


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        (lambda d: (d / "empty.txt").write_text(""), ("empty.txt", "empty")),
        (lambda d: (d / "empty.txt").mkdir(), ("empty.txt", "empty", "no files")),
        (lambda d: (d / "empty.txt").write_text("<p>\n \t </p><br/>\n\n"), ("no text left",)),
        (lambda d: (d / "empty.txt").write_bytes(b"\x7fELF\x02\x01\0\0" * 100), ("binary",)),
    ],
    ids=["empty-file", "empty-folder", "no-text-after-cleaning", "binary-file"],
)
def test_bad_sources_are_one_line_errors(tmp_path, make, fragments):
    make(tmp_path)
    assert_one_line_error(corpus(tmp_path, source="empty.txt"), *fragments, code=1)
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


def test_glob_matching_nothing_is_an_error(tmp_path):
    assert_one_line_error(corpus(tmp_path, source="texts/*.txt"), "matches no files", code=1)


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    (tmp_path / "raw.txt").write_bytes(b"Good text here. Bad \xff\xfe bytes.\n\nMore \xc3 here.\n")
    proc = corpus(tmp_path, source="raw.txt")
    assert proc.returncode == 0, proc.stderr
    assert metrics(tmp_path)["cleaning"]["invalid_utf8_sequences"] == 3
    text = (tmp_path / "data/corpus/train.txt").read_text(encoding="utf-8")
    text += (tmp_path / "data/corpus/val.txt").read_text(encoding="utf-8")
    assert "Bad \ufffd\ufffd bytes." in text and "More \ufffd here." in text


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("corpus.val_fraction=2", "corpus.val_fraction"),
        ("corpus.normalization=NFD", "corpus.normalization"),
        ("corpus.max_sentence_chars=abc", "corpus.max_sentence_chars"),
        ("corpus.colour=red", "corpus.colour"),
    ],
)
def test_bad_params_exit_2_naming_the_key(tmp_path, override, key):
    proc = corpus(tmp_path, "--set", override, source="builtin:python-docs")
    assert_one_line_error(proc, key, code=2)
    assert not (tmp_path / "data").exists()


@pytest.mark.skipif(importlib.util.find_spec("datasets") is not None, reason="datasets installed")
def test_hub_source_without_datasets_says_what_to_install(tmp_path):
    assert_one_line_error(corpus(tmp_path, source="hf:wikitext:wikitext-2-raw-v1"),
                          "pip install datasets", code=1)


# Runs `bert corpus --out DIR` in this process, then prints its peak RSS in kB (VmHWM: unlike
# ru_maxrss it is not inherited from the parent across fork and exec).
PEAK_RSS_OF_BERT_CORPUS = r"""
import re, sys
from stages.cli import cli
try:
    cli(["corpus", "--out", sys.argv[1]], standalone_mode=False)
finally:
    status = open("/proc/self/status").read()
    print(re.search(r"VmHWM:\s+(\d+) kB", status).group(1))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_ten_megabyte_line_in_bounded_memory(tmp_path):
    """The CLI reads a 10 MB line in pieces: its peak memory grows far less than 10 MB x 4."""
    sentence = "Streaming keeps memory flat, e.g. for 3.14 MB lines. "
    (tmp_path / "big.txt").write_text(sentence * (10_000_000 // len(sentence)))
    (tmp_path / "small.txt").write_text(sentence)
    peak = {}
    for name in ("small", "big"):
        (tmp_path / "params.yaml").write_text(yaml.safe_dump({"corpus": {"source": f"{name}.txt"}}))
        proc = subprocess.run(
            [sys.executable, "-c", PEAK_RSS_OF_BERT_CORPUS, f"out-{name}"],
            cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(REPO)},
        )
        assert proc.returncode == 0, proc.stderr
        peak[name] = int(proc.stdout.split()[-1]) / 1024  # MB
    assert metrics(tmp_path)["sentences"] == 10_000_000 // len(sentence)
    assert peak["big"] - peak["small"] < 40, peak
