"""Fixtures only: every test works in its own temporary folder with tiny data it builds. What
tests share besides fixtures (running `bert`, tiny data) is in tests/helpers/."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config, items):
    """On pytest-xdist's workers (`make test`: one file at a time to a worker, in this order),
    the files of slow tests only (whole pipelines) first, then the other files holding a slow
    test, then the rest: the longest start at once and the workers end together. Each file
    stays in one piece (its module fixtures built once). A plain `pytest` keeps the order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow, fast = set(), set()
    for item in items:
        (slow if item.get_closest_marker("slow") else fast).add(item.module)
    items.sort(key=lambda item: (item.module not in slow) + (item.module in fast))  # stable


def pytest_configure(config):
    # Off the network and off the user's tracking server from the start, module fixtures
    # included: one environment for the preloaded interpreters (helpers/preloaded.py), which
    # read HF_HUB_OFFLINE as they import transformers.
    os.environ.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    os.environ.pop("MLFLOW_TRACKING_URI", None)


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch):
    # As pytest_configure left it, whatever a test before changed.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """torch on one thread in the test's own process: its models are tiny, and the cores are
    shared with the other pytest worker and the commands (two threads on a busy 2-core box
    made a 2 s test take 24 s). A `bert` command sets its own."""
    import torch

    torch.set_num_threads(1)


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
    time). For tests about something else; the first repo of test_pipeline.py still creates
    its own. `_empty_mlflow_store` is the path of that one, for a module's fixture."""

    def copy_into(folder: Path) -> Path:
        return Path(shutil.copy(_empty_mlflow_store, Path(folder) / "mlflow.db"))

    return copy_into
