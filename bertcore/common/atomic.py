"""Outputs that appear whole or not at all.

Every output is written next to its final path under a temporary name and renamed into
place once complete, so an interrupted run never leaves a half-written output that looks
finished, and a failed run never destroys the previous finished output (which DVC's
`persist: true` leaves in place). Kept over bare `os.replace` for what it cannot do: replace
a folder that is not empty, a mount point or a link; clean up after a killed process.

Temporary names say who owns them: `.<name>.tmp-<host>-<pid>-<random>`. A process killed
with SIGKILL (or by the OOM killer) cannot clean up, so the next write of the same output
removes the temporaries of processes that are gone (same host only: a live process's
temporary is never touched). A full disk is a `NoSpaceError`, one line for the user; what the
filesystem under an output is (full, a mount point) is `filesystems.py`'s to say.

Two kinds of output folder cannot be renamed and are written differently:

- a link to a folder elsewhere (`models/hf -> /big/disk/hf`): the link stays, the folder it
  points to is the output (staged beside it, on its disk);
- a mount point (`--out /mnt/volume`), which rename refuses (EBUSY): the new content is
  staged inside it and its children are swapped (`_swap_children`); until the last new child
  is in place the previous ones wait in `.<name>.was-...`, so that a failure, or the next
  write after a process died half-way, puts them back.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import glob
import json
import logging
import os
import re
import secrets
import shutil
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path

from bertcore.common.errors import BertError
from bertcore.common.filesystems import DISK_FULL, NoSpaceError, is_disk_full, is_mount_point
from bertcore.common.interrupt import note_replaced

log = logging.getLogger(__name__)

# tmp: staging (or trash); old: an output moved aside for its replacement; was, new: inside
# an output whose children are swapped, its previous children and the new ones.
_TEMPORARY = re.compile(
    r"^\.(?P<name>.+)\.(?P<kind>tmp|old|was|new)-(?P<host>.+)-(?P<pid>\d+)-[a-z0-9_]+$"
)
class ForeignFolderError(BertError):
    """An output folder that holds what its stage does not write there: not an earlier output
    of the stage, and replacing it would delete the user's files."""

    def __init__(self, path: str | os.PathLike, foreign: list[str],
                 advice: str = "point --out elsewhere"):
        self.path, self.foreign = Path(path), foreign
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        super().__init__(f"{self.path} holds {foreign[0]!r}{more}, which this stage does not "
                         "write: it is no earlier output of the stage, and writing there would "
                         f"delete them; {advice} (to a new or empty folder), or move them out")

    def advising(self, advice: str) -> ForeignFolderError:
        return ForeignFolderError(self.path, self.foreign, advice)


def require_own_folder(final: str | os.PathLike, layout: Iterable[str] = (),
                       advice: str = "point --out elsewhere") -> None:
    """Refuse (ForeignFolderError) to replace `final` when it is a folder holding any entry
    whose name matches none of the glob patterns `layout`: what the stage writes there. An
    empty or missing folder is the stage's to write."""
    final = Path(final)
    if not final.is_dir():
        return
    patterns = list(layout)
    foreign = sorted(child.name for child in _children(final)
                     if not any(fnmatch.fnmatchcase(child.name, p) for p in patterns))
    if foreign:
        raise ForeignFolderError(final, foreign, advice)


# ------------------------------------------------------------------------------ temporaries
def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._]", "_", socket.gethostname()) or "localhost"


def _prefix(final: Path, kind: str = "tmp") -> str:
    return f".{final.name}.{kind}-{_host()}-{os.getpid()}-"


def _temporary(final: Path, parent: Path) -> Path:
    """A new name for `final`'s staging in `parent`. Made with plain mkdir/open, not
    mkdtemp/mkstemp: an output gets the mode the umask gives, not 0700/0600."""
    return parent / f"{_prefix(final)}{secrets.token_hex(4)}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, under another user
        pass
    return True


def remove_stale_temporaries(folder: str | os.PathLike, name: str | None = None) -> None:
    """Remove the temporaries in `folder` (of output `name`, or of any) whose process is gone.

    A `.old-` copy is a finished output moved aside for its replacement: if the process died
    between the two renames, the output is missing and the copy is put back instead. A `.was-`
    folder inside `folder` holds its previous children during a swap: they are put back."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    host = _host()
    swaps: dict[str, dict[str, Path]] = {}
    for entry in sorted(folder.iterdir()):
        match = _TEMPORARY.match(entry.name)
        if match is None or match["host"] != host or name not in (None, match["name"]):
            continue
        kind, pid = match["kind"], match["pid"]
        if _alive(int(pid)):
            continue
        final = folder / match["name"]
        if kind in ("was", "new"):  # inside the output whose children it swapped
            if match["name"] == folder.name:
                swaps.setdefault(pid, {})[kind] = entry
        elif kind == "old" and not os.path.lexists(final):
            log.warning("restoring %s from %s (left by a process that died while replacing "
                        "it)", final, entry.name)
            os.replace(entry, final)
        else:
            log.info("removing %s, left by process %s that is gone", entry, pid)
            _remove(entry)
    for swap in swaps.values():
        if "was" in swap:
            log.warning("restoring the previous contents of %s (left by a process that died "
                        "while replacing them)", folder)
        _undo_swap(folder, swap.get("was"), swap.get("new"))


def _remove(entry: Path) -> None:
    with contextlib.suppress(OSError):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


# --------------------------------------------------------------------------------- outputs
def _replace(tmp: Path, final: Path) -> None:
    """Move `tmp` to `final`, replacing what is there; the old one is removed afterwards."""
    if tmp.parent == final:  # staged inside a mount point
        _swap_children(tmp, final)
    elif final.is_dir():  # not a link: atomic_dir resolved it
        old = final.with_name(f"{_prefix(final, 'old')}{secrets.token_hex(4)}")
        try:
            try:
                os.replace(final, old)
            except OSError as exc:  # a mount point `is_mount_point` could not see
                if exc.errno != errno.EBUSY:
                    raise
                _swap_children(tmp, final)
                return
            os.replace(tmp, final)
        except BaseException:  # a signal (`bertcore.common.interrupt`) between the renames
            if old.exists() and not os.path.lexists(final):
                os.replace(old, final)  # the previous output stays, as if nothing happened
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


def _swap_children(tmp: Path, final: Path) -> None:
    """Give `final`, a folder that cannot be renamed, the children of `tmp` instead of its own.

    The previous children go into `final/.NAME.was-...`, `tmp` becomes `final/.NAME.new-...`,
    and its children move up; renaming `was` to trash is the moment the new ones stand. Up to
    then a failure puts the previous children back, and so does the next write after a
    process that died (`remove_stale_temporaries`)."""
    token = secrets.token_hex(4)
    was, new = (final / f"{_prefix(final, kind)}{token}" for kind in ("was", "new"))
    was.mkdir()
    staged = None
    try:
        for child in _children(final):
            os.replace(child, was / child.name)
        staged = new
        _move_inside(tmp, new)
        for child in list(new.iterdir()):
            os.replace(child, final / child.name)
        _fsync_dir(final)
        trash = final / f"{_prefix(final)}{token}"
        os.replace(was, trash)
    except BaseException:
        _undo_swap(final, was, staged)
        raise
    new.rmdir()
    shutil.rmtree(trash, ignore_errors=True)


def _move_inside(tmp: Path, new: Path) -> None:
    """Rename `tmp` to `new`, or copy it where `new` is across a mount point (EXDEV: one that
    `is_mount_point` could not see, so `tmp` was staged outside it)."""
    try:
        os.replace(tmp, new)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.copytree(tmp, new, symlinks=True)


def _children(output: Path) -> list[Path]:
    """What `output` holds, without the temporaries of its own replacement (nor a mounted
    filesystem's lost+found)."""
    return [child for child in output.iterdir()
            if not ((match := _TEMPORARY.match(child.name)) and match["name"] == output.name)
            and not (child.name == "lost+found" and is_mount_point(output))]


def _undo_swap(output: Path, was: Path | None, new: Path | None) -> None:
    """Put back the previous children of `output` kept in `was`; the new ones already moved up
    go back into `new` first, and `new` is removed. (No `was`: the swap was complete, `new`
    is an empty leftover.)"""
    if was is not None and was.is_dir():
        if new is not None:
            for child in _children(output):
                os.replace(child, new / child.name)
        for child in list(was.iterdir()):
            os.replace(child, output / child.name)
        was.rmdir()
    if new is not None:
        shutil.rmtree(new, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(
    final: str | os.PathLike, advice: str = "point --out elsewhere", layout: Iterable[str] = (),
    output: bool = True,
) -> Iterator[Path]:
    """Yield an empty staging directory that becomes `final` when the block succeeds.

    A full disk raises NoSpaceError (`advice` says where else to write). A link to a folder
    (`models/hf -> /big/disk/hf`) stays: the folder it points to is replaced, on its disk.
    A folder there is replaced only when it is empty or an earlier output of the stage: it
    holds nothing but what the new one holds and the glob patterns `layout` (what the stage
    may write there besides: a task's folder, a probe's file); else ForeignFolderError, and
    nothing is replaced (a stage that works long checks first: `require_own_folder`).
    `output`: false for what is kept for a rerun, not a stage's output (GLUE's records): a
    signal's message then does not count it among what the run wrote."""
    final = Path(os.path.realpath(final)) if Path(final).is_symlink() else Path(final)
    with _creating(final, advice):
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(final.parent, final.name)
        remove_stale_temporaries(final, final.name)  # a swap of its children, half done
        # a mount point cannot be renamed: its new content is staged inside it
        staging_parent = final if is_mount_point(final) else final.parent
        tmp = _temporary(final, staging_parent)
        tmp.mkdir()
    with _staged(final, tmp, advice):
        yield tmp
        require_own_folder(final, [*layout, *(glob.escape(c.name) for c in tmp.iterdir())],
                           advice)
        _fsync_dir(tmp)
        _replace(tmp, final)
        _fsync_dir(final.parent)
        if output:
            _note_replaced(final)


@contextlib.contextmanager
def atomic_file(final: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator:
    """Open a staging file that replaces `final` when the block succeeds."""
    final = Path(final)
    with _creating(final):
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(final.parent, final.name)
        tmp = _temporary(final, final.parent)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    with _staged(final, tmp):
        with os.fdopen(fd, mode, **open_kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
        _note_replaced(final)


@contextlib.contextmanager
def _staged(final: Path, tmp: Path, advice: str = "point --out elsewhere") -> Iterator[None]:
    """While `tmp` is written and renamed to `final`: a full disk is a NoSpaceError, and
    whatever is left of `tmp` is removed on the way out."""
    try:
        yield
    except Exception as exc:
        if is_disk_full(exc, tmp):
            raise NoSpaceError(final, advice) from None
        raise
    finally:
        _remove(tmp)


@contextlib.contextmanager
def _creating(final: Path, advice: str = "point --out elsewhere") -> Iterator[None]:
    """Where an output cannot even begin (no permission, a read-only or full disk): one line."""
    try:
        yield
    except OSError as exc:
        if exc.errno in DISK_FULL:
            raise NoSpaceError(final, advice) from None
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise BertError(f"cannot write {final}: {exc.strerror} in {final.parent}; fix its "
                            f"permissions or {advice}") from None
        raise


def write_json(path: str | os.PathLike, data: object, sort_keys: bool = True) -> None:
    """Write `data` as indented JSON, atomically (`sort_keys=False`: in the dict's order, e.g.
    headline metrics first)."""
    with atomic_file(path, "w", encoding="utf-8") as handle:
        dump_json(handle, data, sort_keys)


def dump_json(handle, data: object, sort_keys: bool = True) -> None:
    """`data` as write_json writes it, into an open text file (a staged one)."""
    json.dump(data, handle, indent=2, sort_keys=sort_keys)
    handle.write("\n")


def _note_replaced(final: Path) -> None:
    """Note an output in place (`interrupt.note_replaced`), unless it is a file inside another
    output's staging: that one is noted once it is in place."""
    if not any(_TEMPORARY.match(parent.name) for parent in final.parents):
        note_replaced(final)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
