"""`bert ARGS` as a user runs it, in a process of its own, and what the tests check of what it
said: the run_bert family (plain, paused at a call, interrupted by a signal) and the one-line
error every user mistake must be."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from helpers import preloaded

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
# Tiny models run faster on one thread, and the two cores are shared with the subprocesses:
# every `bert` of the tests runs with these unless a test says otherwise (`cpu.threads`, 1 by
# default, sets torch's count all the same).
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_bert(*args: str, cwd: Path, env: dict | None = None, check: bool = False):
    """Run `bert ARGS` in a process of its own (as a user would) and return the
    CompletedProcess. The process is forked from an interpreter that has imported torch
    (helpers/preloaded.py); `TESTS_REAL_PROCESSES=1` starts each one from scratch instead."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **ONE_THREAD, **(env or {})}
    if not os.environ.get("TESTS_REAL_PROCESSES"):
        proc = preloaded.run(list(args), cwd=cwd, env=full_env, timeout=600)
    else:
        proc = subprocess.run([sys.executable, "-m", "bertstages", *args], cwd=cwd,
                              env=full_env, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"bert {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def assert_one_line_error(proc, *fragments: str, code: int | None = None) -> None:
    """The user sees one line on stderr naming the problem, a non-zero exit, no traceback."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    if code is not None:
        assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])


# `bert ARGS` with one library function wrapped: its Nth call prints PAUSED once it returns
# and then waits for the signal, so a signal sent when PAUSED appears lands right there. It
# waits in Python until the command's own handler has run (chained behind a marker): torch's
# threads may take a process-directed signal, and a handler that only notes it (the training
# loop's) would then never wake a `signal.pause()` in the main thread. SIGUSR1 only resumes
# it (`run_bert_paused`).
_PAUSE_AT = r"""
import importlib, signal, sys, time
module_name, attr, nth, signum, *args = sys.argv[1:]
signum = int(signum)
module = importlib.import_module(module_name)
original, calls, arrived = getattr(module, attr), [], []

def paused(*a, **kw):
    result = original(*a, **kw)
    calls.append(1)
    if len(calls) == int(nth):
        handler = signal.getsignal(signum) if signum != signal.SIGKILL else None
        if handler is not None:
            def marked(sig, frame):
                arrived.append(sig)
                signal.signal(signum, handler)
                if callable(handler):
                    handler(sig, frame)
                elif handler == signal.SIG_DFL and sig != signal.SIGUSR1:
                    signal.raise_signal(sig)
            signal.signal(signum, marked)
        print("PAUSED", file=sys.stderr, flush=True)
        while not arrived:
            time.sleep(0.01)
    return result

setattr(module, attr, paused)
from bertstages.cli import cli
cli(args, prog_name="bert")
"""


def run_bert_interrupted(*args: str, at: str, signum: int, cwd: Path, nth: int = 1,
                         to_group: bool = False) -> subprocess.CompletedProcess:
    """Run `bert ARGS`, send `signum` once the command has made the `nth` call of `at`
    ("module:function", the name the command calls it by), and return what it did then.
    `to_group`: to every process of the command (its workers too), as Ctrl-C in a terminal."""
    proc, before = start_bert_paused(*args, at=at, signum=signum, cwd=cwd, nth=nth,
                                     new_session=to_group)
    if to_group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    return finish_paused(proc, before)


def run_bert_paused(*args: str, at: str, cwd: Path, act: Callable[[subprocess.Popen], None],
                    nth: int = 1) -> subprocess.CompletedProcess:
    """Run `bert ARGS`, pause it once it has made the `nth` call of `at`, call `act(proc)`
    (kill one of its workers), let it go on, and return what it did then."""
    proc, before = start_bert_paused(*args, at=at, signum=signal.SIGUSR1, cwd=cwd, nth=nth)
    act(proc)
    if proc.poll() is None:
        proc.send_signal(signal.SIGUSR1)
    return finish_paused(proc, before)


def start_bert_paused(*args: str, at: str, signum: int, cwd: Path, nth: int = 1,
                      new_session: bool = False, env: dict | None = None,
                      launcher: tuple[str, ...] = ()) -> tuple[subprocess.Popen, list[str]]:
    """`bert ARGS` started and paused at the `nth` call of `at`, waiting for `signum`; the
    Popen and its stderr so far. `launcher`: a command that runs it as its child."""
    module, _, attr = at.partition(":")
    # tests/ too: a module there may stand in for a function (`helpers.dying_worker`), in
    # workers too
    full_env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{TESTS}", **ONE_THREAD,
                **(env or {})}
    command = [*launcher, sys.executable, "-c", _PAUSE_AT, module, attr, str(nth),
               str(int(signum)), *args]
    proc = subprocess.Popen(command, cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=new_session)
    before = []
    for line in proc.stderr:  # until the marker: then the command is where we want it
        before.append(line)
        if line.strip() == "PAUSED":
            return proc, before
    proc.wait(timeout=60)
    raise AssertionError(f"bert {' '.join(args)} never reached {at}:\n{''.join(before)}")


def finish_paused(proc: subprocess.Popen, before: list[str]) -> subprocess.CompletedProcess:
    """What a paused command (`start_bert_paused`) did once it went on."""
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()  # hung: never left behind
        raise
    stderr = "".join(line for line in before if line.strip() != "PAUSED") + stderr
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def pool_workers(pid: int) -> list:
    """The worker processes (psutil) of the pool of process `pid`, spawned by
    multiprocessing (not its resource tracker), or forked by its fork server."""
    import psutil

    children = psutil.Process(pid).children()
    return [worker for child in children for worker in (
        [child] if "spawn_main" in " ".join(child.cmdline()) else
        child.children() if "forkserver" in " ".join(child.cmdline()) else [])]


def fork_servers(pid: int) -> list:
    """The fork servers (psutil) that process `pid` started."""
    import psutil

    return [child for child in psutil.Process(pid).children()
            if "forkserver" in " ".join(child.cmdline())]


def wait_for_lines(path: Path, lines: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Wait until the text file `path` (a training log) has more than `lines` lines, while
    `proc` runs: a signal sent then finds steps really done, however slow the machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if path.is_file() and len(path.read_text().splitlines()) > lines:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path} did not reach {lines} lines (process exit code: "
                         f"{proc.poll()})")
