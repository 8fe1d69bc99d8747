"""Atomic outputs: a failed write keeps the previous finished output; modes are ordinary."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from helpers.tiny_fs import tree

from bertcore.common import atomic
from bertcore.common.atomic import ForeignFolderError, atomic_dir, atomic_file, write_json


def test_atomic_dir_replaces_on_success_and_keeps_old_on_failure(tmp_path):
    out = tmp_path / "out"
    with atomic_dir(out) as staging:
        (staging / "a.txt").write_text("first")
    assert (out / "a.txt").read_text() == "first"
    with pytest.raises(RuntimeError), atomic_dir(out) as staging:
        (staging / "a.txt").write_text("half")
        raise RuntimeError("interrupted")
    assert (out / "a.txt").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging left behind


def test_atomic_file_and_modes(tmp_path):
    umask = os.umask(0o022)
    try:
        write_json(tmp_path / "m.json", {"b": 1, "a": 2})
        with pytest.raises(ValueError), atomic_file(tmp_path / "m.json") as handle:
            handle.write("broken")
            raise ValueError
        with atomic_dir(tmp_path / "d"):
            pass
    finally:
        os.umask(umask)
    assert (tmp_path / "m.json").read_text() == '{\n  "a": 2,\n  "b": 1\n}\n'
    assert stat.S_IMODE((tmp_path / "m.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755


DEAD_PID = 4194304  # above any pid_max: never a live process
ANY = ["*"]  # an output whose names change from one write to the next: any name is its own


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
    with atomic_dir(out, layout=ANY) as staging:
        (staging / "a.txt").write_text("new a")
        (staging / "c.txt").write_text("new c")
    assert tree(out) == {"a.txt": b"new a", "c.txt": b"new c"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # and where the staging folder cannot be renamed into it either: copied
    busy_renaming(monkeypatch, out, across=True)
    with atomic_dir(out, layout=ANY) as staging:
        (staging / "sub").mkdir()
        (staging / "sub" / "d.txt").write_text("new d")
    assert tree(out) == {"sub/d.txt": b"new d"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_failed_swap_puts_the_previous_children_back(tmp_path, monkeypatch):
    out = tmp_path / "out"
    before = previous_output(out)
    busy_renaming(monkeypatch, out, fail_on="c.txt")
    with pytest.raises(OSError, match="Input/output"), atomic_dir(out, layout=ANY) as staging:
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
    with atomic_dir(out, layout=ANY) as staging:  # the next write finds it so, then replaces it
        assert tree(out) == before
        (staging / "d.txt").write_text("new d")
    assert tree(out) == {"d.txt": b"new d"}
    # a temporary without an owner (no host, no pid) is nobody's to remove
    (tmp_path / ".out.tmp-abc").mkdir()
    atomic.remove_stale_temporaries(tmp_path)
    assert (tmp_path / ".out.tmp-abc").is_dir()


# ------------------------------------------------- a user's folder is no output (issue 62, 3)
def users_folder(folder: Path) -> dict[str, bytes]:
    (folder / "bert-base").mkdir(parents=True)
    (folder / "bert-base" / "model.safetensors").write_bytes(b"their weights")
    (folder / "NOTES.md").write_text("what these models are")
    return tree(folder)


def test_a_folder_holding_what_the_stage_does_not_write_is_refused_and_kept(tmp_path):
    before = users_folder(tmp_path / "my_models")
    for layout in ((), ["README.md", "*.json"]):
        with pytest.raises(ForeignFolderError) as refused, atomic_dir(
                tmp_path / "my_models", layout=layout) as staging:
            (staging / "config.json").write_text("{}")
            (staging / "README.md").write_text("the card")
        assert str(refused.value) == (
            f"{tmp_path / 'my_models'} holds 'NOTES.md' and 1 more, which this stage does not "
            "write: it is no earlier output of the stage, and writing there would delete them; "
            "point --out elsewhere (to a new or empty folder), or move them out")
        assert tree(tmp_path / "my_models") == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["my_models"]


def test_its_own_earlier_output_or_an_empty_folder_is_replaced(tmp_path):
    (tmp_path / "empty").mkdir()
    with atomic_dir(tmp_path / "empty") as staging:
        (staging / "a.txt").write_text("new")
    assert tree(tmp_path / "empty") == {"a.txt": b"new"}
    # an earlier output: the same names, or names of the stage's layout (a task it left out)
    (tmp_path / "empty" / "RTE").mkdir()
    (tmp_path / "empty" / "RTE" / "x").write_text("an earlier run's task")
    with atomic_dir(tmp_path / "empty", layout=["RTE", "CoLA"]) as staging:
        (staging / "a.txt").write_text("newer")
    assert tree(tmp_path / "empty") == {"a.txt": b"newer"}
