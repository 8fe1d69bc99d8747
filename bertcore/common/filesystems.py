"""The filesystem under an output, as `atomic` asks about it: where its mount point is,
whether a folder is one (a bind mount within one filesystem included, which a rename refuses
as it does any), and whether an error raised while writing means that the disk is full,
which is a `NoSpaceError`: one line for the user, naming the filesystem and what to do."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

from bertcore.common.errors import BertError

_MOUNTINFO_ESCAPE = re.compile(r"\\([0-7]{3})")  # a space in a mount point is \040
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# Some libraries lose the errno of a failed write (numpy: "N requested and M written", torch:
# "unexpected pos"): after such an error, this little space left means the disk was full.
_NEARLY_FULL_BYTES = 1 << 20


class NoSpaceError(BertError):
    """The filesystem of an output is full: nothing was replaced, temporaries are gone."""

    def __init__(self, path: str | os.PathLike, advice: str = "point --out elsewhere"):
        self.path, self.advice = Path(path), advice
        self.mount = mount_point(self.path)
        super().__init__(
            f"no space left on {self.mount} while writing {self.path}; free space or {advice}"
        )

    def __reduce__(self):  # from a worker process, whole: the stage names the path's option
        return type(self), (self.path, self.advice)


def is_disk_full(exc: BaseException, path: str | os.PathLike) -> bool:
    """Whether `exc`, raised while writing under `path`, means that its disk is full."""
    if isinstance(exc, NoSpaceError):
        return True
    if not isinstance(exc, Exception) or isinstance(exc, BertError):
        return False
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in DISK_FULL:
            return True
        if "No space left on device" in str(cause):  # safetensors' Rust I/O errors
            return True
        cause = cause.__cause__ or cause.__context__
    if not isinstance(exc, OSError | RuntimeError):
        return False
    try:
        return shutil.disk_usage(_existing(Path(path))).free < _NEARLY_FULL_BYTES
    except OSError:
        return False


def mount_point(path: str | os.PathLike) -> Path:
    """The mount point of the filesystem holding `path` (or its nearest existing parent)."""
    path = _existing(Path(path)).resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def _existing(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def is_mount_point(path: Path) -> bool:
    """Whether `path` is a mount point, a bind mount within one filesystem included (which
    os.path.ismount, comparing devices, cannot see; Linux's mount table lists it)."""
    if os.path.ismount(path):
        return True
    if not path.is_dir():
        return False
    try:
        table = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    real = os.path.realpath(path)
    return any(_MOUNTINFO_ESCAPE.sub(lambda m: chr(int(m[1], 8)), line.split(" ")[4]) == real
               for line in table.splitlines() if line.count(" ") >= 4)
