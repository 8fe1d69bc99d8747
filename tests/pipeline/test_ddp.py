"""DDP on CPU with gloo and two processes: the same optimisation and evaluation as one process
with the same global batch, identical parameters on every rank, and recovery from a killed
worker under torchrun with resume from the latest checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers.bert import ONE_THREAD, REPO, run_bert
from helpers.tiny_pretrain import build_data, write_params
from safetensors.torch import load_file
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from bertcore.data.samples.store import SampleStore
from bertcore.data.vocab.files import read_vocab
from bertcore.training.data.batches import eval_batches
from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.training.evaluation.metrics import evaluate
from bertcore.training.hardware.distributed import Distributed
from bertcore.training.loop.trainer import Trainer

TRAIN = dict(max_steps=6, batch_size=16, gradient_accumulation_steps=2, learning_rate=3e-3,
             warmup_steps=2)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return build_data(tmp_path_factory.mktemp("tiny"))


def _train(data: Path, out: Path, rank: int, world_size: int) -> None:
    """One process of a run (world_size 1 is the plain single-process run)."""
    from helpers.trainer import make_trainer

    torch.set_num_threads(1)
    trainer = make_trainer(data, dropout=0.0, world=(rank, world_size), **TRAIN)
    losses: list[float] = []
    Trainer(trainer, on_step=lambda r: losses.append(r.loss), progress=False).train()
    # the val split scored as pretraining does: each process its share, the sums added
    collator = PretrainingCollator(MaskingConfig(max_predictions_per_seq=5),
                                   VocabSpec.from_tokens(read_vocab(data / "vocab")), seed=3)
    val = eval_batches(SampleStore(data / "samples" / "val"), collator, 16, rank=rank,
                       world_size=world_size)
    metrics = evaluate(trainer.raw_model, val, dist=trainer.dist).to_dict()
    torch.save({"losses": losses, "state": trainer.raw_model.state_dict(), "eval": metrics},
               out / f"rank{rank}-of-{world_size}.pt")


def _worker(rank: int, world_size: int, data: Path, out: Path) -> None:
    dist.init_process_group("gloo", init_method=f"file://{out / 'rendezvous'}", rank=rank,
                            world_size=world_size)
    try:
        _train(data, out, rank, world_size)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_processes_optimise_like_one(data, tmp_path):
    _train(data, tmp_path, 0, 1)
    mp.spawn(_worker, args=(2, data, tmp_path), nprocs=2, join=True)
    one = torch.load(tmp_path / "rank0-of-1.pt", weights_only=True)
    rank0 = torch.load(tmp_path / "rank0-of-2.pt", weights_only=True)
    rank1 = torch.load(tmp_path / "rank1-of-2.pt", weights_only=True)
    assert len(one["losses"]) == 6
    torch.testing.assert_close(rank0["losses"], one["losses"], rtol=1e-5, atol=0)
    assert rank0["losses"] == rank1["losses"]  # the logged losses are the global ones
    for name, tensor in one["state"].items():
        torch.testing.assert_close(rank0["state"][name], tensor, rtol=1e-5, atol=1e-6,
                                   msg=name)
        assert torch.equal(rank0["state"][name], rank1["state"][name]), name
    assert one["losses"][-1] < one["losses"][0]
    # evaluation over two processes scores the whole val split, as one process does
    assert rank0["eval"] == rank1["eval"]
    assert rank0["eval"] == pytest.approx(one["eval"], rel=1e-5)
    assert one["eval"]["sequences"] == len(SampleStore(data / "samples" / "val"))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fullgraph", True])
def test_compiled_under_ddp_optimises_like_eager(data, tmp_path, monkeypatch, mode):
    # DDP's own forward breaks the graph, so fullgraph must compile the model inside DDP;
    # compiled either way, with accumulation DDP's no_sync still skips the all-reduce of the
    # first micro-batch
    from helpers.trainer import make_trainer

    eager = make_trainer(data, dropout=0.0, **TRAIN)
    expected: list[float] = []
    Trainer(eager, on_step=lambda r: expected.append(r.loss), progress=False).train()
    real_compile = torch.compile  # aot_eager: the graphs inductor would get, no codegen
    monkeypatch.setattr(torch, "compile",
                        lambda model, **kw: real_compile(model, **{**kw, "backend": "aot_eager"}))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0,
                            world_size=1)
    try:
        torch._dynamo.reset()
        trainer = make_trainer(data, dropout=0.0, compile=mode, **TRAIN)
        assert trainer.ddp is not None
        all_reduces = []
        trainer.ddp.register_comm_hook(None, lambda state, bucket: (
            all_reduces.append(trainer.step), allreduce_hook(None, bucket))[1])
        losses: list[float] = []
        Trainer(trainer, on_step=lambda r: losses.append(r.loss), progress=False).train()
    finally:
        dist.destroy_process_group()
    torch.testing.assert_close(losses, expected, rtol=1e-5, atol=0)
    # each bucket of gradients all-reduced once per step, not once per micro-batch
    buckets = len(trainer.ddp._get_ddp_logging_data()["bucket_sizes"].split(","))
    assert Counter(all_reduces) == {step: buckets for step in range(TRAIN["max_steps"])}


def test_distributed_alone_is_a_no_op():
    alone = Distributed()
    tensor = torch.ones(3)
    assert alone.all_reduce_sum(tensor) is tensor and tensor.tolist() == [1.0, 1.0, 1.0]
    assert alone.all_gather_objects("x") == ["x"]
    assert alone.broadcast_object(5) == 5
    assert alone.is_main and not alone.enabled


# ------------------------------------------------------------------- torchrun, the stage
def _pretrain_params(workdir: Path, **train) -> None:
    # dropout on: each process draws its own dropout masks, which resuming must restore
    write_params(workdir / "params.yaml",
                 model={"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1},
                 train={"max_steps": 80, "batch_size": 16, "gradient_accumulation_steps": 2,
                        "log_every": 1, "eval_every": 20, "checkpoint_every": 5,
                        "keep_last": 20, "nproc_per_node": 2, **train},
                 tracking={"enabled": False})


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


@pytest.mark.slow
def test_a_worker_killed_under_torchrun_resumes_and_finishes(data, tmp_path):
    """Two processes with dropout, one killed after step 10 and both restarted by torchrun:
    they resume from the latest checkpoint, each with its own RNG state, and end with the
    weights of an uninterrupted two-process run."""
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    env = {**os.environ, "PYTHONPATH": str(REPO), **ONE_THREAD}
    for workdir in (straight, crashed):
        workdir.mkdir()
        (workdir / "data").symlink_to(data)
    _pretrain_params(straight)
    run_bert("pretrain", cwd=straight, env=ONE_THREAD, check=True)
    # the processes really draw different dropout masks (else restoring rank 0's RNG state
    # on every process would go unnoticed)
    trainer_state = straight / "models" / "checkpoints" / "step-00000080" / "trainer.pt"
    state = torch.load(trainer_state, weights_only=True)
    assert len(state["rng"]) == 2
    assert not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])

    _pretrain_params(crashed, max_restarts=1)
    # --log also names a torchrun option (--log-dir): the relaunch must pass it through
    launcher = subprocess.Popen([sys.executable, "-m", "bertstages", "pretrain",
                                 "--log", "metrics/rows.tsv"], cwd=crashed,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
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
    final_straight = _weights(straight / "models" / "pretrained")
    final_crashed = _weights(crashed / "models" / "pretrained")
    for name, tensor in final_straight.items():
        torch.testing.assert_close(final_crashed[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    # written by rank 0 only, one row per step, complete across the restart
    rows = (crashed / "metrics" / "rows.tsv").read_text().splitlines()
    assert [int(r.split("\t")[0]) for r in rows[1:]] == list(range(1, 81))
    assert sorted(p.name for p in (crashed / "models" / "checkpoints").iterdir()) == [
        f"step-{s:08d}" for s in range(5, 81, 5)]
