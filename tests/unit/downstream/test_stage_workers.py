"""What a fine-tuning stage (finetune, glue) starts before it imports torch: the server of
its workers, where the params plan several, importing the module of their job; scikit-learn
left to them."""

from __future__ import annotations

import multiprocessing.forkserver
import os
import subprocess
import sys

import psutil
import pytest
import torch
from helpers.bert import REPO

from bertcore.common.config import CpuConfig
from bertcore.downstream import finetune, worker_server, workers
from bertcore.downstream.config import FINETUNE_JOB_MODULE, FinetuneConfig
from bertcore.downstream.glue import fine_tunes
from bertcore.downstream.glue.config import GLUE_JOB_MODULE

NATIVE = CpuConfig(isa="native", threads=1)  # pins nothing in this process's environment


def test_the_modules_the_stages_preload_are_those_of_their_jobs():
    """A name that is not the job's module would start a server whose workers import the
    job's module each, slowly, and still give the right bytes: only this test sees it."""
    assert fine_tunes.fine_tune_job.__module__ == GLUE_JOB_MODULE
    assert finetune.fine_tune_job.__module__ == FINETUNE_JOB_MODULE


@pytest.mark.parametrize("requested", [0, 1, 2, 3])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_planned_workers_are_those_the_stage_runs_on_the_cpu(requested, threads,
                                                                 monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    config = FinetuneConfig(workers=requested, device="cpu")
    planned = worker_server.planned_workers(config, CpuConfig(threads=threads))
    assert planned == workers.fine_tune_workers(requested, "finetune.workers",
                                                torch.device("cpu"))


def test_where_torch_decides_one_worker_is_planned():
    """A GPU's run fine-tunes in the stage's process; torch's own thread count is torch's."""
    assert worker_server.planned_workers(FinetuneConfig(device="cuda"), NATIVE) == 1
    assert worker_server.planned_workers(FinetuneConfig(), CpuConfig(threads=None)) == 1
    assert worker_server.planned_workers(FinetuneConfig(workers=3, device="cuda"), NATIVE) == 3


def test_a_server_started_for_nothing_is_stopped(monkeypatch):
    """Started for the params' two workers, it is stopped once the stage runs one (device
    auto found a GPU); one the stage did not start is left to its pool."""
    monkeypatch.setattr(worker_server, "FINE_TUNE_IMPORTS", ())  # a server in no time
    monkeypatch.setattr(worker_server, "available_cores", lambda: 2)
    worker_server.start_worker_server(FinetuneConfig(workers=0), NATIVE, "json")
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    assert server is not None and psutil.pid_exists(server)
    workers.start_fine_tune_workers(1, "json")
    assert multiprocessing.forkserver._forkserver._forkserver_pid is None
    assert not psutil.pid_exists(server) or psutil.Process(server).status() == "zombie"


def test_one_planned_worker_starts_no_server(monkeypatch):
    monkeypatch.setattr(worker_server, "fork_server", lambda *_: pytest.fail("started"))
    worker_server.start_worker_server(FinetuneConfig(workers=1), NATIVE, "json")
    monkeypatch.setattr(worker_server, "available_cores", lambda: 1)
    worker_server.start_worker_server(FinetuneConfig(workers=0), NATIVE, "json")


def test_the_stages_code_imports_neither_torch_early_nor_scikit_learn():
    """The server starts before the stage imports torch (the stage's code up to there imports
    none); scikit-learn's and scipy's ~1.5 s import is the workers' (preloaded by their
    server), which score: the stage's process, which only plans and collects, never pays it."""
    code = ("import sys, bertstages.glue, bertstages.finetune; "
            "print('torch' in sys.modules); "
            "import bertcore.downstream.glue.report, bertcore.downstream.finetune; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'sklearn', 'scipy'}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    assert proc.stdout.split("\n")[:2] == ["False", "[]"], proc.stdout
