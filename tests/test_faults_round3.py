"""Faults a user hit (issue 30), each through the `bert` command: labelled CSV files read as
written (huge texts, extra fields, quoted newlines, line numbers), outputs on a mount point or
behind a link to another disk replaced without losing the previous one, a full disk under
--metrics named as such, NUL bytes named, a tracking URI without a scheme explained, and the
corpus summary saying how it found the documents."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from helpers.bert import ONE_THREAD, assert_one_line_error, run_bert
from helpers.tiny_fs import bert_in_namespace, bert_on_tiny_fs, needs_mounts, tree
from helpers.tiny_pretrain import build_data, tiny_config, write_params

from bertcore.common import atomic
from bertcore.common.atomic import atomic_dir
from bertcore.data.vocab.files import read_vocab
from bertcore.model.bert import BertPretrainingModel
from bertcore.model.hf import save_model

DEAD_PID = 4194304  # above any pid_max: never a live process


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """data/ and an untrained tiny model in models/pretrained (fine-tuning and export read
    it), with params for a fine-tune of two steps and no tracking."""
    root = tmp_path_factory.mktemp("faults")
    data = build_data(root)
    torch.manual_seed(0)
    model = BertPretrainingModel(tiny_config(len(read_vocab(data / "vocab"))))
    save_model(model, root / "models" / "pretrained")
    params = {"finetune": {"max_steps": 2, "batch_size": 4, "max_seq_length": 8,
                           "test_fraction": 0.5, "device": "cpu"},
              "tracking": {"enabled": False}}
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return root


def finetune(root: Path, data: Path, *more: str):
    return run_bert("finetune", "--set", f"finetune.data={data}", "--out", "finetuned",
                    "--metrics", "finetune.json", *more, cwd=root, env=ONE_THREAD)


def finetune_data(root: Path) -> dict:
    return json.loads((root / "finetune_details.json").read_text())["data"]


# ------------------------------------------------------------------------ CSV (4, 8, 9, 14)
def test_a_csv_text_over_128_kb_is_read(model_dir, tmp_path):
    rows = [f"the big sees the,{label}" for label in ("pos", "neg") * 3]  # 6 tokens: not cut
    huge = " ".join(["the red ship sails the sea ."] * 6000)  # ~170 KB in one field
    (tmp_path / "huge.csv").write_text("text,label\n" + "\n".join(rows) + f"\n{huge},pos\n")
    proc = finetune(model_dir, tmp_path / "huge.csv")
    assert proc.returncode == 0, proc.stderr
    data = finetune_data(model_dir)
    assert data["train_examples"] + data["test_examples"] == 7
    assert sum(data["truncated"].values()) == 1  # the huge one, cut to max_seq_length


def test_a_csv_row_with_more_fields_than_the_header_is_an_error_naming_its_line(model_dir,
                                                                                tmp_path):
    (tmp_path / "extra.csv").write_text("text,label\nI loved this film.,pos\n"
                                        "I hated this film, it was awful.,neg\n")
    proc = finetune(model_dir, tmp_path / "extra.csv")
    assert_one_line_error(proc, "extra.csv:3 has 3 fields where the header has 2 (text, label)",
                          "double quotes")
    (tmp_path / "extra.tsv").write_text("text\tlabel\nfine\tpos\na\ttab\tneg\n")
    assert_one_line_error(finetune(model_dir, tmp_path / "extra.tsv"), "extra.tsv:3 has 3 fields",
                          "cannot hold a tab")


def test_a_newline_inside_a_quoted_csv_text_becomes_a_space(model_dir, tmp_path):
    # 8 tokens with [CLS] and [SEP], the most fine-tuning takes here; "big\nsees" read as
    # "bigsees" is 4 tokens (big ##s ##ee ##s), and the example would be cut
    rows = [f'"the big\nsees the big\nsees",{label}' for label in ("pos", "neg") * 4]
    (tmp_path / "lines.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    proc = finetune(model_dir, tmp_path / "lines.csv")
    assert proc.returncode == 0, proc.stderr
    data = finetune_data(model_dir)
    assert data["train_examples"] + data["test_examples"] == 8
    assert data["truncated"] == {"train": 0, "test": 0}


def test_a_csv_error_names_the_line_a_row_starts_on(model_dir, tmp_path):
    (tmp_path / "late.csv").write_text('text,label\n"one\ntwo\nthree",pos\n"four\nfive",neg\n'
                                       "six,\n")
    assert_one_line_error(finetune(model_dir, tmp_path / "late.csv"), "late.csv:7: the label is "
                          "empty")
    (tmp_path / "open.csv").write_text('text,label\nfine,pos\n"never closed,neg\nmore,pos\n')
    assert_one_line_error(finetune(model_dir, tmp_path / "open.csv"), "open.csv:3: not valid CSV")


# ------------------------------------------------------- a mount point or a link as --out (5, 6)
EXPORTED = {"config.json", "model.safetensors", "vocab.txt"}


def assert_exported(folder: Path) -> None:
    names = {p.name for p in folder.iterdir()}
    assert names >= EXPORTED, names
    assert "previous.txt" not in names
    assert not [n for n in names if ".tmp-" in n or ".was-" in n or ".new-" in n], names


@needs_mounts
def test_export_to_a_mount_point_replaces_its_contents(model_dir, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(model_dir, work)
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "previous.txt").write_text("the previous export")
    proc, after = bert_on_tiny_fs(work, 8 << 20, tmp_path / "seed", "export", "--out", "full")
    assert proc.returncode == 0, proc.stderr
    assert_exported(after)
    # a volume too small for the export: one line, and the previous contents stay
    shutil.rmtree(work / "full")
    shutil.rmtree(after)
    proc, after = bert_on_tiny_fs(work, 32 << 10, tmp_path / "seed", "export", "--out", "full")
    assert_one_line_error(proc, f"no space left on {work / 'full'} while writing full")
    assert tree(after) == tree(tmp_path / "seed")


@needs_mounts
def test_export_to_a_bind_mount_replaces_its_contents(model_dir, tmp_path):
    """A bind mount within one filesystem, which os.path.ismount does not see: the rename
    fails with EBUSY, and the children are swapped instead (written through to `volume`)."""
    work = tmp_path / "work"
    shutil.copytree(model_dir, work)
    (work / "volume").mkdir()
    (work / "volume" / "previous.txt").write_text("the previous export")
    (work / "out").mkdir()
    proc = bert_in_namespace(work, 'mount --bind volume out', "", "export", "--out", "out")
    assert proc.returncode == 0, proc.stderr
    assert_exported(work / "volume")


def test_export_through_a_link_to_a_folder_on_another_disk(model_dir, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(model_dir, work)
    disk = tmp_path / "disk"
    (disk / "hf").mkdir(parents=True)
    (disk / "hf" / "previous.txt").write_text("the previous export")
    (work / "models" / "hf").symlink_to(disk / "hf")
    proc = run_bert("export", cwd=work, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    assert (work / "models" / "hf").is_symlink()  # the link stays, its folder is replaced
    assert_exported(disk / "hf")
    assert sorted(p.name for p in disk.iterdir()) == ["hf"]
    # a link to a folder not made yet: made there
    (work / "models" / "later").symlink_to(disk / "later")
    proc = run_bert("export", "--out", "models/later", cwd=work, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stderr
    assert (work / "models" / "later").is_symlink()
    assert {p.name for p in (disk / "later").iterdir()} >= EXPORTED


# --------------------------------------------- the swap of children, with EBUSY simulated
def busy_renaming(monkeypatch, folder: Path, fail_on: str | None = None,
                  across: bool = False) -> None:
    """os.replace refuses to move `folder` itself (EBUSY, as for a mount point); `across`:
    and to move a folder from outside into it (EXDEV, a filesystem of its own); with
    `fail_on`, moving a file of that name into `folder` fails too (a fault mid-swap)."""
    real = os.replace

    def replace(src, dst):
        if Path(src) == folder:
            raise OSError(errno.EBUSY, "Device or resource busy", str(src))
        if across and folder not in Path(src).parents and Path(dst).parent == folder:
            raise OSError(errno.EXDEV, "Invalid cross-device link", str(src))
        if fail_on and Path(dst) == folder / fail_on:
            raise OSError(errno.EIO, "Input/output error", str(dst))
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)


def previous_output(folder: Path) -> dict[str, bytes]:
    folder.mkdir()
    (folder / "a.txt").write_text("previous a")
    (folder / "sub").mkdir()
    (folder / "sub" / "b.txt").write_text("previous b")
    return tree(folder)


def test_a_folder_that_cannot_be_renamed_gets_its_children_swapped(tmp_path, monkeypatch):
    out = tmp_path / "out"
    previous_output(out)
    busy_renaming(monkeypatch, out)
    with atomic_dir(out) as staging:
        (staging / "a.txt").write_text("new a")
        (staging / "c.txt").write_text("new c")
    assert tree(out) == {"a.txt": b"new a", "c.txt": b"new c"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # and where the staging folder cannot be renamed into it either: copied
    busy_renaming(monkeypatch, out, across=True)
    with atomic_dir(out) as staging:
        (staging / "sub").mkdir()
        (staging / "sub" / "d.txt").write_text("new d")
    assert tree(out) == {"sub/d.txt": b"new d"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_failed_swap_puts_the_previous_children_back(tmp_path, monkeypatch):
    out = tmp_path / "out"
    before = previous_output(out)
    busy_renaming(monkeypatch, out, fail_on="c.txt")
    with pytest.raises(OSError, match="Input/output"), atomic_dir(out) as staging:
        for name in ("a.txt", "b.txt", "c.txt"):
            (staging / name).write_text(f"new {name}")
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in out.iterdir()) == ["a.txt", "sub"]


def test_a_swap_left_half_done_by_a_dead_process_is_undone_at_the_next_write(tmp_path):
    out = tmp_path / "out"
    before = previous_output(out)
    owner = f"{atomic._host()}-{DEAD_PID}-abcd1234"
    # killed while moving the new children up: one is in place, one still staged
    was, new = out / f".out.was-{owner}", out / f".out.new-{owner}"
    was.mkdir()
    new.mkdir()
    for child in ("a.txt", "sub"):
        os.replace(out / child, was / child)
    (out / "a.txt").write_text("new a")
    (new / "c.txt").write_text("new c")
    atomic.remove_stale_temporaries(out, "out")
    assert tree(out) == before
    # killed while moving the previous ones aside: they come back from `was`
    was.mkdir()
    os.replace(out / "sub", was / "sub")
    (out / f".out.tmp-{owner}").mkdir()
    with atomic_dir(out) as staging:  # the next write finds it so, then replaces it
        assert tree(out) == before
        (staging / "d.txt").write_text("new d")
    assert tree(out) == {"d.txt": b"new d"}
    # a temporary without an owner (no host, no pid) is nobody's to remove
    (tmp_path / ".out.tmp-abc").mkdir()
    atomic.remove_stale_temporaries(tmp_path)
    assert (tmp_path / ".out.tmp-abc").is_dir()


# ------------------------------------------------------------ a full disk under --metrics (11)
@needs_mounts
def test_a_full_disk_under_metrics_says_metrics(tmp_path):
    (tmp_path / "small.txt").write_text("One short document.\n\nAnd another one here.\n")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"corpus": {"source": "small.txt"}}))
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "corpus.json").write_text("{}\n")  # the previous metrics: one page
    (tmp_path / "seed" / "filler").write_bytes(bytes(60 << 10))  # and the other 15
    proc, after = bert_on_tiny_fs(tmp_path, 64 << 10, tmp_path / "seed", "corpus", "--out",
                                  "corpus", "--metrics", "full/corpus.json")
    assert_one_line_error(proc, f"no space left on {tmp_path / 'full'} while writing "
                          "full/corpus.json; free space or point --metrics elsewhere")
    assert tree(after) == tree(tmp_path / "seed")


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


# -------------------------------------------------------- a tracking URI without a scheme (13)
def test_a_tracking_uri_without_a_scheme_is_explained_with_mlflows_advice_whole(tmp_path):
    build_data(tmp_path)
    write_params(tmp_path / "params.yaml")
    proc = run_bert("pretrain", "--set", "tracking.uri=garbage-uri", cwd=tmp_path,
                    env=ONE_THREAD)
    assert_one_line_error(proc, "'garbage-uri' has no scheme", "sqlite:///",
                          "MLFLOW_ALLOW_FILE_STORE=true", "fix tracking.uri")
    proc = run_bert("pretrain", "--set", f"tracking.uri={(tmp_path / 'mlruns').as_uri()}",
                    cwd=tmp_path, env=ONE_THREAD)
    assert_one_line_error(proc, "MLFLOW_ALLOW_FILE_STORE=true")
    assert "has no scheme" not in proc.stderr
    assert not (tmp_path / "models").exists()  # before any training


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
