"""Writing outputs when things go wrong: a full disk (a real, tiny filesystem) for the corpus,
samples and pretrain stages, a folder without write permission, and temporaries left by a
process killed mid-write."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.bert import REPO, assert_one_line_error, run_bert
from helpers.tiny_fs import bert_in_namespace, bert_on_tiny_fs, needs_mounts, tree
from helpers.tiny_pretrain import build_data, write_params
from helpers.unprivileged import without_root_powers

from bertcore.common.atomic import atomic_dir, atomic_file
from bertcore.common.filesystems import NoSpaceError
from bertcore.training.checkpoints.checkpoint import CheckpointDir


def no_space_error(proc, mount: Path, what: str, option: str = "--out") -> None:
    assert_one_line_error(proc, f"no space left on {mount} while writing {what}; free space "
                          f"or point {option} elsewhere")


@needs_mounts
def test_disk_full_while_writing_the_corpus(tmp_path):
    (tmp_path / "small.txt").write_text("One short document.\n\nAnd another one here.\n")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"corpus": {"source": "small.txt"}}))
    run_bert("corpus", "--out", "seed/corpus", cwd=tmp_path, check=True)  # the finished output
    metrics = (tmp_path / "metrics" / "corpus.json").read_bytes()
    text = "\n\n".join(f"Document number {i} is here. It says something new {i * 7}."
                       for i in range(6000))
    (tmp_path / "big.txt").write_text(text, encoding="utf-8")  # ~400 KB
    proc, after = bert_on_tiny_fs(tmp_path, 64 << 10, tmp_path / "seed", "corpus", "--out",
                                  "full/corpus", "--set", "corpus.source=big.txt")
    no_space_error(proc, tmp_path / "full", "full/corpus")
    assert tree(after) == tree(tmp_path / "seed")  # the previous output, and nothing else
    assert (tmp_path / "metrics" / "corpus.json").read_bytes() == metrics


@needs_mounts
def test_disk_full_while_writing_samples(tmp_path):
    data = build_data(tmp_path, dupe_factor=1)  # data/samples: the finished output
    shutil.move(data / "samples", tmp_path / "seed" / "samples")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"samples": {
        "max_seq_length": 32, "dupe_factor": 20, "workers": 1}}))
    proc, after = bert_on_tiny_fs(tmp_path, 160 << 10, tmp_path / "seed", "samples", "--out",
                                  "full/samples")
    no_space_error(proc, tmp_path / "full", "full/samples")
    assert tree(after) == tree(tmp_path / "seed")
    assert not (tmp_path / "metrics").exists()


@needs_mounts
def test_disk_full_while_writing_a_checkpoint(tmp_path):
    build_data(tmp_path)
    write_params(tmp_path / "params.yaml", train={"max_steps": 8, "checkpoint_every": 4,
                                                  "eval_every": 0},
                 tracking={"enabled": False})
    # one checkpoint takes ~250 KB (66 KB of weights, 167 KB of optimizer state): one fits
    proc, after = bert_on_tiny_fs(tmp_path, 400 << 10, None, "pretrain", "--checkpoints",
                                  "full/checkpoints")
    no_space_error(proc, tmp_path / "full", "full/checkpoints/step-00000008", "--checkpoints")
    checkpoints = CheckpointDir(after / "checkpoints")
    assert checkpoints.latest().step == 4  # intact (its checksums match): resumable
    assert sorted(p.name for p in after.rglob("*") if p.is_dir()) == ["checkpoints",
                                                                        "step-00000004"]
    assert sorted(p.name for p in after.iterdir()) == ["checkpoints"]  # no staging, no lock
    assert not (tmp_path / "models" / "pretrained").exists()


def test_full_disk_errors_become_no_space_errors(tmp_path, monkeypatch):
    """Where no tiny filesystem can be made: the same mapping, with the error injected."""
    out = tmp_path / "out"
    with atomic_dir(out) as staging:
        (staging / "a").write_text("finished")
    with pytest.raises(NoSpaceError, match=f"while writing {out}; free space or point --out"), \
            atomic_dir(out) as staging:
        raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(NoSpaceError, match="point --checkpoints elsewhere"), \
            atomic_dir(out, advice="point --checkpoints elsewhere") as staging, \
            atomic_file(staging / "inner.json") as handle:  # the outer output is named
        handle.write("x")
        raise OSError(errno.EDQUOT, "Disk quota exceeded")
    # numpy and torch lose the errno ("N requested and M written", "unexpected pos"): what
    # tells then is the free space left
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(9, 9, 0))
    with pytest.raises(NoSpaceError), atomic_dir(out):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576")
    with pytest.raises(ValueError), atomic_dir(out):  # not an I/O error: left as it is
        raise ValueError("a bug")
    monkeypatch.undo()
    with pytest.raises(OSError, match="requested"), atomic_dir(out):  # space left: not full
        raise OSError("385739 requested and 144851 written")
    assert tree(tmp_path) == {"out/a": b"finished"}


KILLED_WHILE_WRITING = """
import os, sys
from bertcore.common.atomic import atomic_dir
writing = atomic_dir(sys.argv[1])
staging = writing.__enter__()
(staging / "half.npy").write_bytes(bytes(1000))
print(staging.name, flush=True)
if sys.argv[2] == "die":
    os.kill(os.getpid(), 9)  # as the OOM killer does
sys.stdin.read()
"""


def test_temporaries_of_killed_processes_are_removed_at_the_next_start(tmp_path):
    data = build_data(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"samples": {"max_seq_length": 32}}))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = subprocess.run([sys.executable, "-c", KILLED_WHILE_WRITING, "data/samples", "die"],
                            cwd=tmp_path, env=env, capture_output=True, text=True)
    stale = data / killed.stdout.strip()
    assert killed.returncode == -9 and stale.is_dir()
    assert re.fullmatch(r"\.samples\.tmp-.+-\d+-\w+", stale.name)  # host, pid: the owner
    live = subprocess.Popen([sys.executable, "-c", KILLED_WHILE_WRITING, "data/samples", "live"],
                            cwd=tmp_path, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        writing = data / live.stdout.readline().strip()
        run_bert("samples", cwd=tmp_path, check=True)
        assert not stale.exists()
        assert (writing / "half.npy").is_file()  # a live process's: untouched
    finally:
        live.communicate("")
    assert sorted(p.name for p in data.iterdir()) == ["corpus", "samples", "vocab"]
    # a killed run's leftovers are never committed by `git add .`
    if shutil.which("git") and (REPO / ".git").exists():
        for path in ("data/.samples.tmp-host-123-abc", "data/.samples.old-host-123-abc",
                     "metrics/.eval.json.tmp-host-123-abc", "models/.checkpoints.lock"):
            ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO)
            assert ignored.returncode == 0, path


def test_an_output_folder_without_write_permission_is_one_line(tmp_path):
    (tmp_path / "small.txt").write_text("One short document.\n\nAnd another one here.\n")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"corpus": {"source": "small.txt"}}))
    (tmp_path / "locked").mkdir(mode=0o555)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for out in ("locked/corpus", "locked/sub/corpus"):
        proc = subprocess.run([*without_root_powers(), sys.executable, "-m", "bertstages", "corpus",
                               "--out", out], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert_one_line_error(proc, f"cannot write {out}: Permission denied",
                              "point --out elsewhere")


# ------------------------------------------------------- a mount point or a link as --out (5, 6)
EXPORTED = {"config.json", "model.safetensors", "vocab.txt"}


def assert_exported(folder: Path) -> None:
    names = {p.name for p in folder.iterdir()}
    assert names >= EXPORTED, names
    assert (folder / "README.md").read_text() != "the previous export"
    assert not [n for n in names if ".tmp-" in n or ".was-" in n or ".new-" in n], names


@needs_mounts
def test_export_to_a_mount_point_replaces_its_contents(model_dir, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(model_dir, work)
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "README.md").write_text("the previous export")
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
    (work / "volume" / "README.md").write_text("the previous export")
    (work / "out").mkdir()
    proc = bert_in_namespace(work, 'mount --bind volume out', "", "export", "--out", "out")
    assert proc.returncode == 0, proc.stderr
    assert_exported(work / "volume")


def test_export_through_a_link_to_a_folder_on_another_disk(model_dir, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(model_dir, work)
    disk = tmp_path / "disk"
    (disk / "hf").mkdir(parents=True)
    (disk / "hf" / "README.md").write_text("the previous export")
    (work / "models" / "hf").symlink_to(disk / "hf")
    proc = run_bert("export", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert (work / "models" / "hf").is_symlink()  # the link stays, its folder is replaced
    assert_exported(disk / "hf")
    assert sorted(p.name for p in disk.iterdir()) == ["hf"]
    # a link to a folder not made yet: made there
    (work / "models" / "later").symlink_to(disk / "later")
    proc = run_bert("export", "--out", "models/later", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert (work / "models" / "later").is_symlink()
    assert {p.name for p in (disk / "later").iterdir()} >= EXPORTED


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


# ---------------------------------------- a user's folder as --out (issue 62, case 3)
def test_export_into_a_users_folder_of_models_is_refused_and_keeps_it(model_dir, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(model_dir, work)
    for name in ("bert-tiny/model.safetensors", "bert-mini/pytorch_model.bin"):
        (work / "my_models" / name).parent.mkdir(parents=True)
        (work / "my_models" / name).write_bytes(b"someone's weights")
    (work / "my_models" / "NOTES.md").write_text("which model is which")
    before = tree(work / "my_models")
    proc = run_bert("export", "--out", "my_models", cwd=work)
    assert_one_line_error(proc, "my_models holds 'NOTES.md' and 2 more, which this stage does "
                          "not write", "point --out elsewhere (to a new or empty folder)")
    assert tree(work / "my_models") == before
    # its own earlier export is replaced
    run_bert("export", "--out", "models/hf", cwd=work, check=True)
    (work / "models" / "hf" / "README.md").write_text("the previous card")
    run_bert("export", "--out", "models/hf", cwd=work, check=True)
    assert (work / "models" / "hf" / "README.md").read_text() != "the previous card"
