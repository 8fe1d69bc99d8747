"""A pool whose workers are forked from a fork server (`TaskRunner(preload=...)`) runs the
code this process would: the server imports its modules from this process's module path
and environment, not from its own; it ends with its stage, at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
from helpers.bert import REPO

from bertcore.common.pool import TaskRunner

MODULE = "fork_server_probe"


def write_copy(folder, name: str) -> None:
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(
        "import os\n"
        f"COPY = {name!r}\n"
        "IMPORTED_BY = os.getpid()\n"
        "def which(_task):\n"
        "    return COPY, IMPORTED_BY != os.getpid(), os.environ.get('FORK_SERVER_PROBE')\n")


def test_the_workers_run_the_modules_of_this_process_path_imported_once(tmp_path,
                                                                        monkeypatch):
    write_copy(tmp_path / "installed", "installed")  # on PYTHONPATH: the server's own path
    write_copy(tmp_path / "mine", "mine")  # first on this process's path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path / "installed"), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(tmp_path / "mine"))
    import fork_server_probe

    with TaskRunner(2, preload=(MODULE,)) as run:
        first = list(run(fork_server_probe.which, range(4)))
    monkeypatch.setenv("FORK_SERVER_PROBE", "set after")  # the server started before
    with TaskRunner(2, preload=(MODULE,)) as run:
        then = list(run(fork_server_probe.which, range(4)))
    # this process's copy, imported by the server (not by each worker), with the variable
    # set since in the workers
    assert first == [("mine", True, None)] * 4
    assert then == [("mine", True, "set after")] * 4


def test_the_server_ends_with_its_stage_without_tearing_down_its_imports(tmp_path):
    """Its imports' teardown (torch's: over a second) would hold the stage's stdout and
    stderr open after the stage ended: a module it preloaded is imported, and the exit
    handler that module registered (run by a full teardown) never runs."""
    (tmp_path / "teardown_probe.py").write_text(
        "import atexit, pathlib\n"
        f"HERE = pathlib.Path({str(tmp_path)!r})\n"
        "(HERE / 'imported').touch()\n"
        "atexit.register((HERE / 'torn down').touch)\n")
    server = server_of_a_stage(tmp_path, "teardown_probe", "imported")
    assert ended_soon(server)
    assert not (tmp_path / "torn down").exists()


def test_a_stage_that_ends_at_once_ends_its_server_in_its_imports(tmp_path):
    """A stage stopped by a bad input right after it started the server (which it starts
    before its own imports) leaves no server importing torch for seconds: the server's
    import of a module that takes 60 s is cut short."""
    (tmp_path / "slow_probe.py").write_text(
        "import pathlib, time\n"
        f"HERE = pathlib.Path({str(tmp_path)!r})\n"
        "(HERE / 'importing').touch()\n"
        "time.sleep(60)\n"
        "(HERE / 'imported').touch()\n")
    server = server_of_a_stage(tmp_path, "slow_probe", "importing")
    assert ended_soon(server)
    assert not (tmp_path / "imported").exists()


def server_of_a_stage(folder, module: str, marker: str) -> int:
    """The pid of the fork server a stage (a process) started with `module` preloaded; the
    stage ends once `marker` is in `folder`."""
    stage = ("import pathlib, sys, time\n"
             "sys.path.insert(0, sys.argv[1])\n"
             "from bertcore.common.fork_server import fork_server\n"
             "print(fork_server([sys.argv[2]])[1], flush=True)\n"
             "deadline = time.monotonic() + 60\n"
             "while not pathlib.Path(sys.argv[1], sys.argv[3]).exists() "
             "and time.monotonic() < deadline:\n"
             "    time.sleep(0.02)\n")
    proc = subprocess.run([sys.executable, "-c", stage, str(folder), module, marker],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return int(proc.stdout)


def ended_soon(pid: int) -> bool:
    """Whether process `pid` ends within 30 s."""
    deadline = time.monotonic() + 30
    while not ended(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return ended(pid)


def ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
