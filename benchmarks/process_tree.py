"""Run a command and watch its process tree: wall time, peak RSS summed over the tree, and its
CPU seconds split by where they were spent (shared by the data-stage benchmarks).

The CPU split is what a projection to more cores needs (`scale.py`): the root process's main
thread, its other threads (tokenizers' Rayon pool; for a stage with a process pool, the
pool's two feeder threads, which hold the GIL), and its descendant processes (pool workers).
The tree is polled every `interval` seconds (RSS, per-thread CPU of the root); the total CPU is
exact (wait4 counts the root and every descendant it reaped), the split up to one interval
stale, its remainder counted to the descendants.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass
class TreeUsage:
    seconds: float  # wall clock, from start to exit
    peak_rss: int  # bytes: the largest sum of RSS over the tree at one poll
    main_thread_cpu: float  # user + system seconds of the root's main thread
    other_threads_cpu: float  # of the root's other threads
    children_cpu: float  # of its descendants
    log: str  # what it wrote to stdout and stderr

    @property
    def cpu(self) -> float:
        return self.main_thread_cpu + self.other_threads_cpu + self.children_cpu


class _Watcher:
    """The latest readings of one process tree, kept across polls (exited members keep
    their last)."""

    def __init__(self, pid: int):
        self.root = psutil.Process(pid)
        self.peak_rss = 0
        self.threads: dict[int, float] = {}

    def poll(self) -> None:
        try:
            tree = [self.root, *self.root.children(recursive=True)]
            self.threads = {t.id: t.user_time + t.system_time for t in self.root.threads()}
        except psutil.Error:
            return
        rss = 0
        for process in tree:
            with contextlib.suppress(psutil.Error):  # it just exited
                rss += process.memory_info().rss
        self.peak_rss = max(self.peak_rss, rss)


def run_watched(args: list[str], cwd: str | Path, env: dict | None = None,
                interval: float = 0.1, check: bool = True) -> tuple[int, TreeUsage]:
    """Run `args`, polling its tree; (exit code, usage). `check`: exit with its log when it
    fails."""
    log_path = Path(cwd) / f".watched-{os.getpid()}-{time.monotonic_ns()}.log"
    started = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        watcher = _Watcher(proc.pid)
        while True:
            watcher.poll()
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(interval)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    text = log_path.read_text(errors="replace")
    log_path.unlink()
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{text[-3000:]}")
    total = rusage.ru_utime + rusage.ru_stime
    main = watcher.threads.get(proc.pid, 0.0)
    others = sum(cpu for tid, cpu in watcher.threads.items() if tid != proc.pid)
    usage = TreeUsage(seconds, watcher.peak_rss, main, others,
                      max(0.0, total - main - others), text)
    return proc.returncode, usage
