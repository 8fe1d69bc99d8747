"""Corpus inputs as the user has them: binary or damaged files, JSON Lines and Parquet with
`format: lines`, more workers than cores."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertcore.common.errors import BertError
from bertcore.common.pool import available_cores
from bertcore.data.corpus.build import build_corpus
from bertcore.data.corpus.config import CorpusConfig

# ------------------------------------------------------------------------- 4. corpus inputs
SENTENCES = "Document {i} opens here. It goes on with a second sentence. A third one ends it."


def _mkdir(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    return folder


def build(tmp_path, source, **config):
    config = {"workers": 1, **config}
    return build_corpus(CorpusConfig(source=str(source), **config),
                        _mkdir(tmp_path / "out"), progress=False)


def test_invalid_utf8_in_json_lines_warns_as_in_a_text_file(tmp_path, caplog):
    lines = [json.dumps({"text": SENTENCES.format(i=i)}).encode() for i in range(30)]
    lines[5] = lines[5].replace(b"opens", b"op\xffns")
    lines[9] = lines[9].replace(b"third", b"th\xc3rd")
    (tmp_path / "d.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    stats = build(tmp_path, tmp_path / "d.jsonl")
    assert stats.cleaning["invalid_utf8_sequences"] == 2
    assert (f"{tmp_path / 'd.jsonl'}: 2 invalid UTF-8 sequences replaced by U+FFFD (first on "
            "line 6)") in caplog.messages


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_format_lines_leaves_records_documents_of_prose(tmp_path, suffix):
    texts = [SENTENCES.format(i=i) for i in range(30)]
    if suffix == "jsonl":
        (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    else:
        pq.write_table(pa.table({"text": texts}), tmp_path / "d.parquet")
    stats = build(tmp_path, tmp_path / f"d.{suffix}", format="lines")
    assert stats.input["records"] == 30
    assert stats.sentences == 90  # three a record, as with format auto or prose


def binary_files(folder: Path) -> list[Path]:
    rng = random.Random(0)
    noise = bytes(rng.randrange(256) for _ in range(20000))
    files = {"photo.png": b"\x89PNG\r\n\x1a\n" + noise[:5000],
             "paper.pdf": b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n" + noise[:5000], "blob.bin": noise}
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return [folder / name for name in files]


def test_binary_files_in_a_folder_are_skipped_with_one_warning_each(tmp_path, caplog):
    binary = binary_files(tmp_path / "texts")
    (tmp_path / "texts" / "notes.txt").write_text(
        "\n\n".join(SENTENCES.format(i=i) for i in range(20)) + "\n")
    stats = build(tmp_path, tmp_path / "texts", format="lines")
    assert stats.dropped["binary_files"] == 3 and stats.documents == 20
    skipped = [m for m in caplog.messages if m.startswith("skipping")]
    assert skipped == [f"skipping {path}: binary, not text ({kind})" for path, kind in (
        (binary[2], "2118 control bytes in its first 20000, where text holds next to none"),
        (binary[1], "a PDF document: extract its text first, e.g. with pdftotext"),
        (binary[0], "a PNG image"))]


def test_a_folder_of_only_binary_files_or_one_binary_file_is_an_error(tmp_path):
    binary = binary_files(tmp_path / "texts")
    with pytest.raises(BertError, match="holds only binary files \\(3\\); give it text"):
        build(tmp_path, tmp_path / "texts")
    for path in binary:
        with pytest.raises(BertError) as info:
            build(tmp_path, path)
        assert str(info.value).startswith(f"cannot use {path} as corpus.source: it is binary")


def test_latin1_text_still_stops_with_the_advice_to_convert_it(tmp_path):
    text = "\n\n".join(f"Le {i}e café était très animé. Déjà vu à Noël." for i in range(50))
    (tmp_path / "old.txt").write_bytes(text.encode("latin-1"))
    with pytest.raises(BertError, match=r"old.txt is not UTF-8.*iconv -f WINDOWS-1252"):
        build(tmp_path, tmp_path / "old.txt")


def test_more_corpus_workers_than_cores_is_warned_of_once(tmp_path, caplog):
    cores = available_cores()
    (tmp_path / "notes.txt").write_text("\n\n".join(SENTENCES.format(i=i) for i in range(20)))
    build(tmp_path, tmp_path / "notes.txt", workers=cores)
    assert not [m for m in caplog.messages if "corpus.workers" in m]
    stats = build(tmp_path, tmp_path / "notes.txt", workers=cores + 1)  # one task: no pool
    assert stats.sentences == 60
    warned = [m for m in caplog.messages if "corpus.workers" in m]
    assert warned == [f"corpus.workers: {cores + 1} workers on the {cores} cores this stage may "
                      f"use take turns on them, each with its own memory, and run slower than "
                      f"{cores}: set corpus.workers: 0 (one per core)"]
