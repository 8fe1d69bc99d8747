"""`bert ARGS` with a filesystem mounted for it: a tiny tmpfs (a full disk, a mount point as
an output) or a bind mount, in a user and mount namespace of its own (`unshare -rm`), so no
root is needed and nothing outlives the command. Where such namespaces are not allowed, the
tests that need them skip (`needs_mounts`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.bert import ONE_THREAD, REPO

# Runs SETUP (mounting something), then `bert ARGS`, then AFTER, in one namespace: what is
# on a tmpfs has to be copied out by AFTER, since the tmpfs goes away with the namespace.
IN_NAMESPACE = """
eval "$SETUP" || exit 90
"$@" 2> "$STDERR"
echo $? > "$RC"
eval "$AFTER"
"""
# A tmpfs of SIZE on MOUNT holding a copy of SEED; afterwards its files are copied to COPY.
TINY_FS = ('mount -t tmpfs -o size="$SIZE" tmpfs "$MOUNT" && '
           '{ [ ! -d "$SEED" ] || cp -a "$SEED/." "$MOUNT/"; }')
COPY_OUT = 'cp -a "$MOUNT/." "$COPY/"'


def _can_mount() -> bool:
    if not sys.platform.startswith("linux") or not shutil.which("unshare"):
        return False
    probe = Path(__file__).parent  # any folder: the mount is private and undone at once
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$0"',
                           str(probe)], capture_output=True)
    return proc.returncode == 0


needs_mounts = pytest.mark.skipif(
    not _can_mount(),
    reason="needs unprivileged user namespaces (unshare -rm) to mount a tmpfs or bind mount",
)


def bert_in_namespace(cwd: Path, setup: str, after: str, *args: str, **env: str):
    """`bert ARGS` in `cwd`, between the shell commands `setup` and `after` (with `env`)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **ONE_THREAD, **env, "SETUP": setup,
                "AFTER": after, "STDERR": str(cwd / "stderr.txt"), "RC": str(cwd / "rc.txt")}
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", IN_NAMESPACE, "sh", sys.executable,
                           "-m", "bertstages", *args], cwd=cwd, env=full_env, timeout=600,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return subprocess.CompletedProcess(args, int((cwd / "rc.txt").read_text()), "",
                                       (cwd / "stderr.txt").read_text())


def bert_on_tiny_fs(cwd: Path, size: int, seed: Path | None, *args: str):
    """`bert ARGS` in `cwd` with a `size`-byte filesystem at cwd/full, holding a copy of
    `seed`; returns the CompletedProcess and a copy of what the filesystem held at the end."""
    (cwd / "full").mkdir()
    after = cwd / "after"
    after.mkdir()
    result = bert_in_namespace(cwd, TINY_FS, COPY_OUT, *args, SIZE=str(size),
                               MOUNT=str(cwd / "full"), SEED=str(seed or ""), COPY=str(after))
    return result, after


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}
