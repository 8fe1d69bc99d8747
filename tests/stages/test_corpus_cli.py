"""`bert corpus` as a user runs it: outputs, metrics, and one-line errors for bad input."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.bert import REPO, assert_one_line_error, run_bert


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
from bertstages.cli import cli
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


FRENCH = ["Le café était très agréable ce matin-là.", "Où est passé le garçon ?",
          "Noël à Paris, c'est féerique.", "Elle a déjà lu ce récit deux fois."]


def french_documents(n: int) -> str:
    """`n` documents of three French sentences (four lines with the blank one after)."""
    return "\n\n".join("\n".join([f"Le récit numéro {i}.", FRENCH[i % 4], FRENCH[(i + 1) % 4]])
                       for i in range(n)) + "\n"


def corpus_text(tmp_path: Path) -> str:
    return "".join((tmp_path / "data/corpus" / f"{s}.txt").read_text(encoding="utf-8")
                   for s in ("train", "val"))


def test_a_latin1_file_stops_naming_it_and_how_to_convert_it(tmp_path):
    """Every accented letter of a Latin-1 file would become U+FFFD: one line instead, naming
    the file, where, and the conversion (no guessing: guessers confuse the Latin encodings)."""
    (tmp_path / "old.txt").write_bytes(french_documents(50).encode("latin-1"))
    proc = corpus(tmp_path, source="old.txt")
    assert_one_line_error(proc, "old.txt is not UTF-8", "line 1", r"Le r\xe9cit",
                          "iconv -f WINDOWS-1252 -t UTF-8 old.txt > old.utf8.txt", code=1)
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())
    subprocess.run(["iconv", "-f", "WINDOWS-1252", "-t", "UTF-8", "-o", "old.utf8.txt",
                    "old.txt"], cwd=tmp_path, check=True)  # what the message says to do
    assert corpus(tmp_path, source="old.utf8.txt").returncode == 0
    assert "Le café était très agréable ce matin-là." in corpus_text(tmp_path)


def test_a_few_bad_bytes_in_a_utf8_corpus_stay_a_warning(tmp_path):
    text = french_documents(400).encode("utf-8")
    lines = text.split(b"\n")
    for i in range(0, len(lines), 80):  # 20 damaged lines among 3600 accented characters
        lines[i] += b" \xff"
    (tmp_path / "damaged.txt").write_bytes(b"\n".join(lines))
    english = [f"Sentence {i} of a long English file." for i in range(20000)]
    for i in range(0, 20000, 2000):  # 10 stray bytes in 20000 ASCII lines: damage, too
        english[i] += " \x92"
    (tmp_path / "english.txt").write_bytes("\n".join(english).encode("latin-1"))
    for name, count in (("damaged.txt", 20), ("english.txt", 10)):
        proc = corpus(tmp_path, source=name)
        assert proc.returncode == 0, proc.stderr
        assert f"{count} invalid UTF-8 sequences replaced by U+FFFD" in proc.stderr
        assert metrics(tmp_path)["cleaning"]["invalid_utf8_sequences"] == count


def test_compressed_files_are_read_as_they_stream(tmp_path):
    """gzip, bzip2 and xz files (many corpora ship so) give the corpus of their text, whatever
    their names; archives of files are skipped, saying to unpack them."""
    import bz2
    import gzip
    import lzma
    import zipfile

    plain = french_documents(30).encode("utf-8")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a.txt").write_bytes(plain)
    assert corpus(tmp_path, source="plain").returncode == 0
    expected = corpus_text(tmp_path)
    for name, packed in (("a.txt.gz", gzip.compress(plain, mtime=0)),
                         ("a.txt.bz2", bz2.compress(plain)), ("a.xz", lzma.compress(plain))):
        folder = tmp_path / name.replace(".", "_")
        folder.mkdir()
        (folder / name).write_bytes(packed)
        proc = corpus(tmp_path, source=folder.name)
        assert proc.returncode == 0, proc.stderr
        assert corpus_text(tmp_path) == expected and "skipping" not in proc.stderr
        assert metrics(tmp_path)["input"]["bytes"] == len(packed)  # the bytes on disk
    records = "".join(json.dumps({"text": t}) + "\n" for t in FRENCH).encode("utf-8")
    (tmp_path / "books.jsonl.gz").write_bytes(gzip.compress(records))
    assert corpus(tmp_path, source="books.jsonl.gz").returncode == 0
    assert metrics(tmp_path)["input"]["records"] == 4

    with zipfile.ZipFile(tmp_path / "texts.zip", "w") as archive:
        archive.writestr("a.txt", plain)
    proc = corpus(tmp_path, source="texts.zip")
    assert_one_line_error(proc, "cannot use texts.zip as corpus.source: it is a zip archive "
                          "(unzip it), not text", code=1)
    (tmp_path / "old.txt.gz").write_bytes(gzip.compress(french_documents(9).encode("latin-1")))
    assert_one_line_error(corpus(tmp_path, source="old.txt.gz"), "old.txt.gz is not UTF-8",
                          "gzip -dc old.txt.gz | iconv -f WINDOWS-1252 -t UTF-8 > old.utf8.txt")


# ------------------------------------------------------------------------- NUL bytes (12)
def test_nul_bytes_are_named(tmp_path):
    text = "".join(f"Sentence number {i} of the text.\nAnother one follows it {i}.\n\n"
                   for i in range(3000))  # ~170 KB, one sentence per line
    damaged = text[:100] + "\0" + text[100:150_000] + "\0" + text[150_000:]
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "damaged.txt").write_text(damaged)
    (tmp_path / "texts" / "data.bin").write_bytes(b"\x01\x00\x00\x00" * 1000)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"corpus": {"source": "texts",
                                                                      "format": "lines"}}))
    proc = run_bert("corpus", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "damaged.txt: 2 NUL bytes removed (first on line 5)" in proc.stderr
    assert ("skipping texts/data.bin: binary, not text (3000 NUL bytes in its first 4000, the "
            "first at byte 1;") in proc.stderr
    stats = json.loads((tmp_path / "metrics" / "corpus.json").read_text())
    assert stats["documents"] == 3000 and stats["dropped"]["binary_files"] == 1


# ----------------------------------------------- how the corpus found its documents (odd)
def test_the_corpus_summary_says_how_documents_were_found(tmp_path):
    paragraphs = [f"Document {i} is about topic {i}. It has a second sentence, longer than the "
                  f"first.\nThis line wraps the paragraph of document {i} on." for i in range(20)]
    (tmp_path / "prose.txt").write_text("\n\n".join(paragraphs) + "\n")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"corpus": {"source": "prose.txt"}}))
    proc = run_bert("corpus", cwd=tmp_path, check=True)
    summary = proc.stderr.strip().splitlines()[-1]
    assert summary.startswith("corpus: 1 documents, split by parts"), summary
    assert "1 file(s) read as prose, one document each" in summary
    assert "corpus.format: lines" in summary and "JSON Lines" in summary
    proc = run_bert("corpus", "--set", "corpus.format=lines", cwd=tmp_path, check=True)
    summary = proc.stderr.strip().splitlines()[-1]
    assert summary.startswith("corpus: 20 documents"), summary
    assert "1 file(s) of one sentence per line, documents between blank lines" in summary
    assert "corpus.format" not in summary
