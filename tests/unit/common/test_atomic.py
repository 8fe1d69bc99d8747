"""Atomic outputs: a failed write keeps the previous finished output; modes are ordinary."""

from __future__ import annotations

import os
import stat

import pytest

from bertcore.common.atomic import atomic_dir, atomic_file, write_json


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
