"""A lock on a folder, so that two runs never write into it at once.

`filelock.FileLock` on `.<name>.lock` beside the folder: the OS releases it when its holder
dies, however it dies, so a lock left by a killed run is simply taken over, and children forked
by the holder (DataLoader workers) neither hold nor release it. The file also holds the
holder's pid, host and start time, for the message the second run shows.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import filelock

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
    path = lock_path(folder)
    created = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    lock = filelock.FileLock(path, timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        holder = _read(path)
        who = (f"pid {holder['pid']} on {holder.get('host', '?')} since "
               f"{holder.get('since', '?')}" if holder.get("pid") else "another process")
        raise FolderInUseError(f"{folder} is in use by {who}; {advice}") from None
    try:
        previous = _read(path)  # a holder's that died: the OS released its lock
        if previous.get("pid"):
            log.info("taking over the lock of %s from pid %s on %s (no longer running)",
                     folder, previous["pid"], previous.get("host"))
        path.write_text(json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(),
            "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}))
        yield path
    finally:
        path.unlink(missing_ok=True)  # while still held, so that nobody finds it stale
        lock.release()
        for folder_made in created:  # a run that wrote nothing leaves nothing behind
            with contextlib.suppress(OSError):
                folder_made.rmdir()


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
