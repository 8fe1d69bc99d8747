"""Outputs that appear whole or not at all.

Every output is written next to its final path under a temporary name and renamed into
place once complete, so an interrupted run never leaves a half-written output that looks
finished, and a failed run never destroys the previous finished output.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _default_mode(is_dir: bool) -> int:
    """The mode a plain mkdir/open would give (mkdtemp/mkstemp use 0700/0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if is_dir else 0o666) & ~umask


def _replace(tmp: Path, final: Path) -> None:
    """Move `tmp` to `final`, replacing what is there; the old one is removed afterwards."""
    if final.is_dir() and not final.is_symlink():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty staging directory that becomes `final` when the block succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    os.chmod(tmp, _default_mode(is_dir=True))
    try:
        yield tmp
        _fsync_dir(tmp)
        _replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_file(final: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator:
    """Open a staging file that replaces `final` when the block succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.tmp-", dir=final.parent)
    tmp = Path(name)
    os.chmod(tmp, _default_mode(is_dir=False))
    try:
        with os.fdopen(fd, mode, **open_kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_json(path: str | os.PathLike, data: object, sort_keys: bool = True) -> None:
    """Write `data` as indented JSON, atomically (`sort_keys=False`: in the dict's order, e.g.
    headline metrics first)."""
    import json

    with atomic_file(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=sort_keys)
        handle.write("\n")


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
