"""Which process runs something, in words another process can check later: whether it has
ended (a run left RUNNING in MLflow by a process killed outright). Linux only (/proc); where
there is no /proc, no label, and nothing is ever taken for ended."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path


def process_label() -> str | None:
    """This process: host name, boot id, pid namespace, pid and the process's start time,
    joined by spaces; None without /proc."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
        namespace = os.readlink("/proc/self/ns/pid")
        started = _start_time(os.getpid())
    except (OSError, IndexError):
        return None
    return " ".join((socket.gethostname(), boot, namespace, str(os.getpid()), started))


def has_ended(label: str) -> bool:
    """Whether the process `label` (a `process_label`) names has ended, as far as this process
    can tell: one of this host before its last boot, or of this boot and pid namespace whose
    pid is gone or now another process's. Another host's or pid namespace's: False, it may
    still run."""
    mine, theirs = (process_label() or "").split(" "), label.split(" ")
    if len(mine) != 5 or len(theirs) != 5 or theirs[0] != mine[0]:
        return False
    if theirs[1] != mine[1]:
        return True  # this host has rebooted since
    if theirs[2] != mine[2]:
        return False
    try:
        return _start_time(int(theirs[3])) != theirs[4]
    except (OSError, ValueError, IndexError):
        return True  # no such process


def _start_time(pid: int) -> str:
    """When process `pid` started, in clock ticks after boot (field 22 of /proc/PID/stat,
    read after the command name, which may hold spaces)."""
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    return stat.rsplit(")", 1)[1].split()[19]


def how_it_ended(exitcode: int) -> str:
    """A process's end in words, from its exit code as `multiprocessing` reports it (minus
    the signal's number when a signal killed it): "killed by SIGKILL", "exit code 1"."""
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"
