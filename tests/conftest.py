"""Shared fixtures: every test works in its own temporary folder with tiny data it builds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Tiny models run faster on one thread, and the two cores are shared with the subprocesses.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch):
    # Keep tests off the network and off the user's tracking server.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="module")
def one_thread():
    """torch on one thread in this process for a module (`pytestmark = usefixtures(...)`)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run_bert(*args: str, cwd: Path, env: dict | None = None, check: bool = False):
    """Run `bert ARGS` in a subprocess (as a user would) and return the CompletedProcess."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "stages", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
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


@pytest.fixture(scope="session")
def _empty_mlflow_store(tmp_path_factory) -> Path:
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()  # creates the tables
    return path


@pytest.fixture()
def mlflow_db(_empty_mlflow_store):
    """`mlflow_db(folder)` puts an empty MLflow SQLite store at folder/mlflow.db, a copy of
    one made once per session: creating a store runs its schema migrations (seconds each
    time). For tests about something else; the pipeline test still creates its own."""

    def copy_into(folder: Path) -> Path:
        return Path(shutil.copy(_empty_mlflow_store, Path(folder) / "mlflow.db"))

    return copy_into
