"""`bert ARGS` in a fresh process that does not pay the big libraries' imports: a forked child
of an interpreter that imported torch, torch._dynamo (which every optimizer's constructor
imports), mlflow's client, SQL store and pyfunc, matplotlib (the charts), scikit-learn with
scipy (a fine-tune's scores) and transformers (a model's card and MLflow Model) once (as a
fork server does), so the ~6 s of CPU those imports cost is paid once per pytest worker and
environment instead of once per command.

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
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bertcore.common.cpu_env import PINNED_NAMES

# Read by our code or its libraries when used, not when the interpreter or what it preloads
# loads: the kernels' pinning is read at torch's first kernel (bertcore/common/cpu.py).
LATE_READ = ("PYTEST_CURRENT_TEST", "PYTHONPATH", "PATH", "MLFLOW_", "DVC_", "GIT_",
             "TOKENIZERS_PARALLELISM", "COVERAGE_", "COLUMNS", "TESTS_PRELOADED_", *PINNED_NAMES,
             "PWD", "OLDPWD", "SHLVL", "_")  # the last four: what a shell sets

_SERVER = r"""
import os

LATE_READ = LATE_READ_TUPLE


def not_read_late(env):
    return {k: v for k, v in env.items() if not k.startswith(LATE_READ)}


AT_LOAD = not_read_late(os.environ)  # before any import can add to it
FORKED = []  # the pids of the shim's commands

import atexit, gc, json, runpy, select, signal, socket, sys, threading
import torch  # noqa: F401  (the import paid once; nothing here runs a kernel)
import torch._dynamo  # noqa: F401  (every optimizer's constructor imports it: ~1 s)
import mlflow.tracking  # noqa: F401  (a stage that tracks: ~1 s, and its store's ~0.7 s)
import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
import matplotlib.figure  # noqa: F401  (a stage's charts: ~0.6 s)
import matplotlib.backends.backend_agg  # noqa: F401
import sklearn.metrics  # noqa: F401  (a fine-tune's scores: ~1.3 s with scipy's)
import scipy.stats  # noqa: F401
import transformers  # noqa: F401  (a model's card and its MLflow Model: ~0.9 s with the Hub's)
from transformers import BertForPreTraining, pipeline  # noqa: F401  (its lazy parts)
import huggingface_hub.hf_api  # noqa: F401
import mlflow.pyfunc  # noqa: F401  (an MLflow Model logged: ~0.2 s with what it takes along)
from mlflow.utils import requirements_utils

# MLflow checks a logged model's requirements against a map of every installed package to
# its modules, built from their metadata on first use (~0.8 s): built here once
requirements_utils._init_modules_to_packages_map()

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


def start_command(request, fds):
    # Fork `python -m bertstages ARGS` with `fds` as its stdin, stdout and stderr: its pid.
    pid = os.fork()
    if pid == 0:  # the command: a process of its own from here on
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.pop("TESTS_PRELOADED_SOCKET", None)  # its own `bert`s start from scratch
        paths = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[1:1] = [p for p in paths if p not in sys.path]
        for fd, source in zip((0, 1, 2), fds):
            os.dup2(source, fd)
            os.close(source)
        sys.argv = ["-m", *request["args"]]
        exit_as_python_does(command_exit_code())
    for source in fds:
        os.close(source)
    return pid


def exit_code(pid):
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def serve_line(line):
    # A request of the test's own process: a JSON line naming the files for stdout/stderr.
    request = json.loads(line)
    fds = [os.open(os.devnull, os.O_RDONLY), os.open(request["stdout"], os.O_WRONLY),
           os.open(request["stderr"], os.O_WRONLY)]
    pid = start_command(request, fds)
    reply({"pid": pid})
    reply({"returncode": exit_code(pid)})


def reply(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve_connection(connection):
    # A request of the `bert` shim that dvc started: its stdin, stdout and stderr come with
    # it; an environment that differs at load time is sent back to start from scratch.
    with connection:
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        request = json.loads(message)
        if not_read_late(request["env"]) != AT_LOAD:
            for fd in fds:
                os.close(fd)
            connection.send(b'{"from_scratch": true}')
            return
        pid = start_command(request, fds)
        FORKED.append(pid)
        connection.send(json.dumps({"pid": pid}).encode())
        connection.send(json.dumps({"returncode": exit_code(pid)}).encode())


listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
listener.bind(sys.argv[1])
listener.listen()
reply({"listening": True})
while True:
    ready, _, _ = select.select([sys.stdin, listener], [], [])
    if listener in ready:
        serve_connection(listener.accept()[0])
    if sys.stdin in ready:
        line = sys.stdin.readline()
        if not line:
            break
        if line.strip() == "forked":
            reply({"forked": len(FORKED)})
        else:
            serve_line(line)
"""

# by the environment at load time: an interpreter, and the folder of its socket and `bert` shim
_servers: dict[tuple, tuple[subprocess.Popen, Path]] = {}

# `bert` for the stages dvc starts: handed to the preloaded interpreter listening at
# $TESTS_PRELOADED_SOCKET with this process's stdin, stdout and stderr, or started from
# scratch where it cannot be (no server, or an environment that differs at load time).
_SHIM = r"""#!PYTHON -S
import json, os, signal, socket, sys


def from_scratch():
    os.execv(sys.executable, [sys.executable, "-m", "bertstages", *sys.argv[1:]])


connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
try:
    connection.connect(os.environ["TESTS_PRELOADED_SOCKET"])
except (KeyError, OSError):
    from_scratch()
request = {"args": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}
socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
reply = json.loads(connection.recv(1 << 16))
if reply.get("from_scratch"):
    from_scratch()
for signum in (signal.SIGINT, signal.SIGTERM):  # what dvc sends its stage, the command gets
    signal.signal(signum, lambda signum, frame: os.kill(reply["pid"], signum))
code = json.loads(connection.recv(1 << 16))["returncode"]
if code < 0:  # the command died of a signal: so does its stand-in
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def _load_time_key(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if not k.startswith(LATE_READ)))


def _server(env: dict) -> tuple[subprocess.Popen, Path]:
    """The interpreter preloaded under `env` (one per pytest worker and environment at load
    time), started if need be, and its folder: the socket it listens at and the `bert` shim
    that hands a command to it. It starts with `env`'s variables read at load, and this
    process's PATH (what it runs while it imports: gitpython runs `git`)."""
    key = _load_time_key(env)
    if key not in _servers or _servers[key][0].poll() is not None:
        if key in _servers:  # one that ended: its folder goes with it
            shutil.rmtree(_servers.pop(key)[1], ignore_errors=True)
        folder = Path(tempfile.mkdtemp(prefix="bert-shim-"))
        shim = folder / "bert"
        shim.write_text(_SHIM.replace("PYTHON", sys.executable, 1))
        shim.chmod(0o755)
        start_env = {**dict(key), "PATH": os.environ.get("PATH", os.defpath)}
        source = _SERVER.replace("LATE_READ_TUPLE", repr(LATE_READ))
        server = subprocess.Popen([sys.executable, "-c", source, str(folder / "socket")],
                                  env=start_env, text=True, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, cwd="/")
        _servers[key] = server, folder
        assert _reply(server, 120) == {"listening": True}
    return _servers[key]


def dvc_env(env: dict) -> dict:
    """`env` for a `dvc` command whose stages' `bert` are forked as `run` forks them: a `bert`
    shim first on PATH hands each to the interpreter preloaded under this environment.
    Its commands share that interpreter's string hash seed: a test that catches output
    depending on it compares with a run under another seed (`PYTHONHASHSEED` in `env`:
    another interpreter). `TESTS_REAL_PROCESSES=1` gives `env` as it is."""
    if os.environ.get("TESTS_REAL_PROCESSES"):
        return env
    folder = _server(env)[1]
    return {**env, "PATH": f"{folder}{os.pathsep}{env['PATH']}",
            "TESTS_PRELOADED_SOCKET": str(folder / "socket")}


def forked_by_shims(env: dict) -> int:
    """How many commands the shim of `dvc_env(env)` has had forked so far."""
    server = _server(env)[0]
    server.stdin.write("forked\n")
    server.stdin.flush()
    return _reply(server, 60)["forked"]


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
    server = _server(env)[0]
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
    for server, folder in _servers.values():
        if server.poll() is None:
            server.stdin.close()
            server.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
