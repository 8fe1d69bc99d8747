"""The fork server that forks a pool's workers (`fork_server`): a process that imported the
workers' modules once, started with this process's environment and module path, and stopped
and started again when the environment its imports read has changed (`stop_fork_server`).
Every process it forks leaves the server to the stage (`leave_fork_server_to_stage`), and it
ends with the stage, at once (fork_server_exit.py). Python 3.11's `multiprocessing.forkserver`
runs it; what it does not expose is read from its private `_forkserver`."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import sys
from collections.abc import Iterator, Sequence

# For Python's resource tracker (a process multiprocessing starts, with the interpreter's
# -W options, once per process): a stage killed outright leaves its pool's semaphores to it,
# which it removes, warning of them as "leaked"; nothing for a user to act on.
QUIET_TRACKER = "ignore::UserWarning:multiprocessing.resource_tracker"


def leave_fork_server_to_stage() -> None:
    """In a worker forked by the fork server: close its copy of the pipe whose end tells the
    server that its clients are gone (every process it forks gets one), so the server ends
    when the stage does, and its workers then with it (pool.py's `start_worker`: its signal)."""
    server = multiprocessing.forkserver._forkserver
    if server._forkserver_alive_fd is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None


# The environment and module path the fork server started with, which its imports read
_fork_server_env: dict[str, str] = {}
_fork_server_path: list[str] = []
# Variables that native libraries read as they load or first compute (threads, kernels): a
# server started without one that the stage has now imported its modules without it.
NATIVE_VARIABLES = ("OMP_", "MKL_", "KMP_", "OPENBLAS_", "ATEN_", "ONEDNN_", "DNNL_", "CUDA_")


# Imported by the fork server first: it then ends the moment its stage does, without tearing
# down what it imported (fork_server_exit.py)
SERVER_EXIT = "bertcore.common.fork_server_exit"
# The variable that tells it its stage's pid (the parent it checks it still has)
STAGE_PID = "BERT_FORK_SERVER_STAGE"


def _fork_server_stale() -> bool:
    """Whether the environment changed since the server started in a way its imports may
    have read: a variable changed or gone, or a native library's added. Other variables
    added since (MLflow's timeouts) reach its workers as they start (pool.py's `start_worker`)."""
    now = os.environ
    return (sys.path != _fork_server_path
            or any(now.get(name) != value for name, value in _fork_server_env.items())
            or any(name.startswith(NATIVE_VARIABLES) for name in now.keys() - _fork_server_env))


def fork_server(preload: Sequence[str]) -> tuple[multiprocessing.context.BaseContext, int]:
    """The forkserver context, its server running with the modules `preload` imported once
    (or, started before, with those it had) and this process's environment, and the server's
    pid: its workers start forked from it, with those modules, in no time. A server that
    started in an environment its imports may have read otherwise is stopped first."""
    global _fork_server_env, _fork_server_path
    context = multiprocessing.get_context("forkserver")
    server = multiprocessing.forkserver._forkserver
    if server._forkserver_pid is not None and _fork_server_stale():
        server._stop()
    if server._forkserver_pid is None:
        quiet_tracker()
        context.set_forkserver_preload([SERVER_EXIT, *preload])
        _fork_server_env, _fork_server_path = dict(os.environ), list(sys.path)
    with _server_environment():
        server.ensure_running()  # a server that died starts again
    return context, server._forkserver_pid


def stop_fork_server() -> None:
    """Stop the fork server this process started, if it runs."""
    server = multiprocessing.forkserver._forkserver
    if server._forkserver_pid is not None:
        server._stop()


@contextlib.contextmanager
def _server_environment() -> Iterator[None]:
    """While the server starts, PYTHONPATH set to this process's module path (`sys.path`): it
    imports its modules from where this process would (Python 3.11's server is handed the
    path and ignores it: a path added in-process, a test's, would be missing there, and an
    installed copy of the package imported instead); and STAGE_PID to this process's pid.
    Its workers take the stage's environment back as they start (pool.py's
    `start_worker`)."""
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", STAGE_PID)}
    os.environ["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
    os.environ[STAGE_PID] = str(os.getpid())  # for fork_server_exit.py
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def quiet_tracker() -> None:
    """Python's resource tracker told to keep quiet (QUIET_TRACKER)."""
    if QUIET_TRACKER not in sys.warnoptions:  # read when the tracker (or a server) starts
        sys.warnoptions.append(QUIET_TRACKER)
