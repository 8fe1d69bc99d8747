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
    stage = ("import sys; sys.path.insert(0, sys.argv[1]); "
             "from bertcore.common.fork_server import fork_server; "
             "print(fork_server(['teardown_probe'])[1], flush=True)")
    proc = subprocess.run([sys.executable, "-c", stage, str(tmp_path)], capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    server = int(proc.stdout)  # its stage has ended: so does it, on its own
    deadline = time.monotonic() + 60
    while not ended(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ended(server)
    assert (tmp_path / "imported").exists()
    assert not (tmp_path / "torn down").exists()


def ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
