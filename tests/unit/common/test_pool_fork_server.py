"""A pool whose workers are forked from a fork server (`TaskRunner(preload=...)`) runs the
code this process would: the server imports its modules from this process's module path
and environment, not from its own."""

from __future__ import annotations

import os

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
