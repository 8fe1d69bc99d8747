"""Several processes on CPU with gloo: the same bytes as one process (weights, losses,
evaluation) for 1, 2 and 4 of them, on every rank, and recovery from a killed worker under
torchrun with resume from the latest checkpoint, to the same bytes; a worker whose torchrun is
killed ends."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
import torch.distributed as dist
from helpers.bert import ONE_THREAD, REPO, run_bert
from helpers.tiny_pretrain import build_data, write_params
from helpers.trainer import spawn_ranks

from bertcore.data.samples.store import SampleStore
from bertcore.data.vocab.files import read_vocab
from bertcore.training.data.batches import eval_batches
from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.training.evaluation.metrics import evaluate
from bertcore.training.hardware.distributed import Distributed
from bertcore.training.loop.trainer import Trainer

# dropout on: drawn per micro-batch, so the processes must not draw it by rank either
TRAIN = dict(max_steps=4, batch_size=16, micro_batches=4, learning_rate=3e-3, warmup_steps=2)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return build_data(tmp_path_factory.mktemp("tiny"))


def _train(data: Path, out: Path, rank: int, world_size: int) -> None:
    """One process of a run (world_size 1 is the plain single-process run)."""
    from helpers.trainer import make_trainer

    torch.set_num_threads(1)
    trainer = make_trainer(data, dropout=0.1, world=(rank, world_size), **TRAIN)
    losses: list[float] = []
    Trainer(trainer, on_step=lambda r: losses.append(r.loss), progress=False).train()
    # the val split scored as pretraining does: each process its share, the sums added
    collator = PretrainingCollator(MaskingConfig(max_predictions_per_seq=5),
                                   VocabSpec.from_tokens(read_vocab(data / "vocab")), seed=3)
    val = eval_batches(SampleStore(data / "samples" / "val"), collator, 16, rank=rank,
                       world_size=world_size)
    metrics = evaluate(trainer.raw_model, val, dist=trainer.dist).to_dict()
    weights = hashlib.sha256()
    for name, tensor in sorted(trainer.raw_model.state_dict().items()):
        weights.update(name.encode() + tensor.numpy().tobytes())
    torch.save({"losses": losses, "sha256": weights.hexdigest(), "eval": metrics},
               out / f"rank{rank}-of-{world_size}.pt")


def _worker(rank: int, world_size: int, data: Path, out: Path) -> None:
    dist.init_process_group("gloo", init_method=f"file://{out / f'rendezvous{world_size}'}",
                            rank=rank, world_size=world_size)
    try:
        _train(data, out, rank, world_size)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_one_two_and_four_processes_give_the_same_bytes(data, tmp_path):
    """The gradient's micro-batches are added in one fixed tree, dropout is drawn per
    micro-batch: 1, 2 and 4 processes give the same losses, weights (sha256) and
    evaluation, to the bit, on every rank."""
    _train(data, tmp_path, 0, 1)
    for world_size in (2, 4):  # 4 processes on fewer cores: only slower
        spawn_ranks(_worker, (world_size, data, tmp_path), world_size)
    one = torch.load(tmp_path / "rank0-of-1.pt", weights_only=True)
    assert len(one["losses"]) == TRAIN["max_steps"]
    assert one["eval"]["sequences"] == len(SampleStore(data / "samples" / "val"))
    for world_size in (2, 4):
        for rank in range(world_size):
            run = torch.load(tmp_path / f"rank{rank}-of-{world_size}.pt", weights_only=True)
            assert run["sha256"] == one["sha256"], (world_size, rank)
            assert run["losses"] == one["losses"], (world_size, rank)
            assert run["eval"] == one["eval"], (world_size, rank)


def test_distributed_alone_is_a_no_op():
    alone = Distributed()
    tensor = torch.ones(3)
    assert alone.all_reduce_sum(tensor) is tensor and tensor.tolist() == [1.0, 1.0, 1.0]
    assert alone.all_gather_objects("x") == ["x"]
    assert alone.broadcast_object(5) == 5
    assert alone.is_main and not alone.enabled


# ------------------------------------------------------------------- torchrun, the stage
def _pretrain_params(workdir: Path, **train) -> None:
    # dropout on: drawn per micro-batch, which resuming and the process count must not change
    write_params(workdir / "params.yaml",
                 model={"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1},
                 train={"max_steps": 80, "batch_size": 16, "micro_batches": 2,
                        "log_every": 1, "eval_every": 20, "checkpoint_every": 5,
                        "keep_last": 20, "nproc_per_node": 2, **train},
                 tracking={"enabled": False})


@pytest.mark.slow
def test_a_worker_killed_under_torchrun_resumes_and_finishes(data, tmp_path):
    """Two processes with dropout, one killed after step 10 and both restarted by torchrun:
    they resume from the latest checkpoint and end with the very bytes of an uninterrupted
    run in one process."""
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    env = {**os.environ, "PYTHONPATH": str(REPO), **ONE_THREAD}
    for workdir in (straight, crashed):
        workdir.mkdir()
        (workdir / "data").symlink_to(data)
    _pretrain_params(straight, nproc_per_node=1)
    run_bert("pretrain", cwd=straight, check=True)

    _pretrain_params(crashed, max_restarts=1)
    temp = tmp_path / "temp"  # where torchrun would leave a torchelastic_* folder a run
    temp.mkdir()
    # --log also names a torchrun option (--log-dir): the relaunch must pass it through
    launcher = subprocess.Popen([sys.executable, "-m", "bertstages", "pretrain",
                                 "--log", "metrics/rows.tsv"], cwd=crashed,
                                env={**env, "TMPDIR": str(temp)}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    first = crashed / "models" / "checkpoints" / "step-00000010"
    deadline = time.monotonic() + 300  # the kill comes once step 10 is really done
    while not first.exists() and time.monotonic() < deadline and launcher.poll() is None:
        time.sleep(0.05)
    assert first.exists(), f"no checkpoint of step 10 (launcher exit code {launcher.poll()})"
    workers = [p for p in psutil.Process(launcher.pid).children(recursive=True)
               if p.environ().get("LOCAL_RANK") == "1"]
    assert len(workers) == 1, "worker of rank 1 not found"
    workers[0].send_signal(signal.SIGKILL)
    _, stderr = launcher.communicate(timeout=300)
    assert launcher.returncode == 0, stderr
    assert "resuming from" in stderr
    weights = [(f / "models" / "pretrained" / "model.safetensors").read_bytes()
               for f in (straight, crashed)]
    assert weights[0] == weights[1]
    # written by rank 0 only, one row per step, complete across the restart
    rows = (crashed / "metrics" / "rows.tsv").read_text().splitlines()
    assert [int(r.split("\t")[0]) for r in rows[1:]] == list(range(1, 81))
    assert sorted(p.name for p in (crashed / "models" / "checkpoints").iterdir()) == [
        f"step-{s:08d}" for s in range(5, 81, 5)]
    assert not [p.name for p in temp.iterdir() if p.name.startswith(("torchelastic_", "bert-"))]


@pytest.mark.slow
@pytest.mark.parametrize("when", ["as it starts", "once it trains"])
def test_a_worker_whose_torchrun_is_killed_ends(data, tmp_path, when):
    """torchrun killed (SIGKILL: no word to its workers, which run in sessions of their own)
    as its worker starts, or once the worker trains: the worker ends, instead of waiting for
    the dead launcher's store (torch retries it for the group's 30-minute timeout) or
    training on unwatched (here 100000 steps)."""
    (tmp_path / "data").symlink_to(data)
    _pretrain_params(tmp_path, max_steps=100_000, nproc_per_node=1)
    env = {**os.environ, "PYTHONPATH": str(REPO), **ONE_THREAD}
    launcher = subprocess.Popen([sys.executable, "-m", "torch.distributed.run",
                                 "--nproc-per-node=1", "--standalone", "-m", "--", "bertstages",
                                 "pretrain"], cwd=tmp_path, env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        worker = _first_worker(launcher)
        first = tmp_path / "models" / "checkpoints" / "step-00000005"
        deadline = time.monotonic() + 300
        while when == "once it trains" and not first.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert when == "as it starts" or first.exists(), "no checkpoint of step 5"
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
        worker.wait(timeout=240)  # psutil.TimeoutExpired: it waits on (seconds on an idle machine)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
        if worker is not None and worker.is_running():
            worker.kill()  # in a session of its own


def _first_worker(launcher: subprocess.Popen) -> psutil.Process:
    """torchrun's worker, as soon as it exists."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and launcher.poll() is None:
        for child in psutil.Process(launcher.pid).children():
            return child
        time.sleep(0.005)
    raise AssertionError(f"torchrun started no worker (exit code {launcher.poll()})")
