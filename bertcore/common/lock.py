"""A lock on a folder, so that two runs never write into it at once.

The lock is a file beside the folder, `.<name>.lock`, holding an OS lock (POSIX `lockf`)
and, for the message the second run shows, the holder's pid, host and start time. The OS
releases the lock when its process dies, however it dies, so a lock left by a killed run is
simply taken over. The lock is per process: children forked by the holder (DataLoader
workers) neither hold nor release it.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from bertcore.common.errors import BertError

log = logging.getLogger(__name__)


class FolderInUseError(BertError):
    """Another live process holds the lock of the folder."""


def lock_path(folder: str | os.PathLike) -> Path:
    folder = Path(folder)
    return folder.parent / f".{folder.name}.lock"


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, advice: str) -> Iterator[Path]:
    """Hold the lock of `folder` for the block, or raise FolderInUseError at once (the
    message names the holder, then `advice`)."""
    import fcntl

    path = lock_path(folder)
    created = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            raise FolderInUseError(f"{folder} is in use by {_holder(path)}; {advice}") from None
        # The holder before us may have removed the file between our open and our lock:
        # then we locked a file nobody else will see; start again on the current one.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        previous = _read(fd)
        if previous.get("pid"):
            log.info("taking over the lock of %s from pid %s on %s (no longer running)",
                     folder, previous.get("pid"), previous.get("host"))
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode("utf-8"), 0)
        yield path
    finally:
        # Remove the file while still holding the lock, so that nobody finds it stale.
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)
        for folder_made in created:  # a run that wrote nothing leaves nothing behind
            with contextlib.suppress(OSError):
                folder_made.rmdir()


def _read(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _holder(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return "another process"
    try:
        info = _read(fd)
    finally:
        os.close(fd)
    if not info.get("pid"):
        return "another process"
    return f"pid {info['pid']} on {info.get('host', '?')} since {info.get('since', '?')}"
