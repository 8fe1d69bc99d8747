"""`bert ARGS` in a fresh process that does not pay the big libraries' imports: a forked child
of an interpreter that imported torch, torch._dynamo (which every optimizer's constructor
imports) and mlflow's client and SQL store once (as a fork server does), so the ~3 s of CPU
those imports cost is paid once per pytest worker instead of once per command.

The child is a process of its own, as `python -m bertstages ARGS` is: its own pid, exit code,
signals, stdout and stderr, environment, working folder and `sys.path`, and its own import of
the project (the parent imports none of it, opens no MLflow store, nor runs a kernel: torch
chooses its kernels and MKL its branch in the child, after `cpu.isa` has pinned them). What a
forked child cannot change is what an interpreter and torch's libraries read from the
environment when they load (the thread count of OpenMP, `PYTHON*`, the locale, ...): so one
parent serves the calls whose environment is the same apart from the variables read later
(`LATE_READ`), and any other environment gets a parent of its own. The string hash seed is the
parent's, shared by its children: the pipeline tests, whose stages are real processes, catch
output that depends on it.

Why not `click.testing.CliRunner` in the test's process (measured on four test files): it is
3-7 times faster there, but not the command a user runs. A stage pins the CPU's kernels before
torch computes and refuses once torch has computed in the process (`cpu.isa: avx2`, the
default: every stage that trains or scores failed so); it leaves its thread count and pinned
kernels (`ATEN_CPU_CAPABILITY`, `MKL_CBWR`, ...) and MLflow's settings in the environment for
the tests after it; its `logging.basicConfig` finds pytest's handlers on the root logger, so
its warnings never reach the stderr the test reads.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path

# Read by our code or its libraries when used, not when the interpreter or torch loads.
LATE_READ = ("PYTEST_CURRENT_TEST", "PYTHONPATH", "MLFLOW_", "HF_", "TRANSFORMERS_", "DVC_",
             "GIT_", "TOKENIZERS_PARALLELISM", "COVERAGE_", "COLUMNS")

_SERVER = r"""
import atexit, gc, json, os, runpy, signal, sys, threading
import torch  # noqa: F401  (the import paid once; nothing here runs a kernel)
import torch._dynamo  # noqa: F401  (every optimizer's constructor imports it: ~1 s)
import mlflow.tracking  # noqa: F401  (a stage that tracks: ~1 s, and its store's ~0.7 s)
import mlflow.store.tracking.sqlalchemy_store  # noqa: F401

# Objects that exist now are never collected: a child's collector then leaves their pages
# shared instead of copying the whole heap (gc.freeze's documented use before fork).
gc.freeze()


def exit_as_python_does(code):
    # Py_FinalizeEx's observable steps (threads joined, atexit, buffers flushed), then out
    # without tearing down torch's modules, which would touch, and copy, every shared page.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def command_exit_code():
    try:
        runpy.run_module("bertstages", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # as Python does: die of the SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:  # the command: a process of its own from here on
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        paths = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[1:1] = [p for p in paths if p not in sys.path]
        for fd, path, mode in ((0, os.devnull, os.O_RDONLY),
                               (1, request["stdout"], os.O_WRONLY),
                               (2, request["stderr"], os.O_WRONLY)):
            opened = os.open(path, mode)
            os.dup2(opened, fd)
            os.close(opened)
        sys.argv = ["-m", *request["args"]]
        exit_as_python_does(command_exit_code())
    sys.stdout.write(json.dumps({"pid": pid}) + "\n")
    sys.stdout.flush()
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
    sys.stdout.flush()
"""

_servers: dict[tuple, subprocess.Popen] = {}


def _load_time_key(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if not k.startswith(LATE_READ)))


def _server(env: dict) -> subprocess.Popen:
    key = _load_time_key(env)
    server = _servers.get(key)
    if server is None or server.poll() is not None:
        start_env = {k: v for k, v in env.items() if not k.startswith(LATE_READ)}
        server = subprocess.Popen([sys.executable, "-c", _SERVER], env=start_env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/")
        _servers[key] = server
    return server


def _reply(server: subprocess.Popen, timeout: float | None) -> dict:
    ready, _, _ = select.select([server.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError
    line = server.stdout.readline()
    if not line:
        raise RuntimeError(f"the preloaded interpreter exited ({server.wait()})")
    return json.loads(line)


def run(args: list[str], cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`python -m bertstages ARGS` in `cwd` with exactly `env`, as `subprocess.run` with
    `capture_output=True, text=True` would give it."""
    server = _server(env)
    with tempfile.TemporaryDirectory() as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        out.touch()
        err.touch()
        request = {"args": list(args), "cwd": str(cwd), "env": env, "stdout": str(out),
                   "stderr": str(err)}
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        pid = _reply(server, 60)["pid"]
        try:
            returncode = _reply(server, timeout)["returncode"]
        except TimeoutError:
            os.kill(pid, 9)
            _reply(server, 60)
            raise subprocess.TimeoutExpired(args, timeout, out.read_text(),
                                            err.read_text()) from None
        command = [sys.executable, "-m", "bertstages", *args]
        return subprocess.CompletedProcess(command, returncode, out.read_text(encoding="utf-8"),
                                           err.read_text(encoding="utf-8"))


@atexit.register
def _stop_servers() -> None:
    for server in _servers.values():
        if server.poll() is None:
            server.stdin.close()
            server.wait(timeout=30)
