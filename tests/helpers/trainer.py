"""A StepRunner built as the pretrain stage builds one, on the tiny data: for the tests of the
loop, its steps, several processes and the device check; and the processes of a run of
several (`spawn_ranks`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.multiprocessing as mp

from bertcore.common.fork_server import fork_server, stop_fork_server
from bertcore.data.samples.store import SampleStore
from bertcore.data.vocab.files import read_vocab
from bertcore.model.bert import BertPretrainingModel
from bertcore.training.config import TrainConfig
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.training.hardware.distributed import Distributed
from bertcore.training.loop.step import StepRunner
from helpers.tiny_pretrain import tiny_config


class FirstSamples:
    """The first `n` samples of a store."""

    def __init__(self, store, n: int):
        self.store, self.n = store, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        return self.store[index]


def make_trainer(data: Path, dropout: float = 0.1, model: dict | None = None,
                 samples: int | None = None, world: tuple[int, int] = (0, 1),
                 **train) -> StepRunner:
    """What the pretrain stage builds, on the tiny data, float32 on the CPU. `world`:
    (rank, world_size) of this process in an initialised process group (if any)."""
    config = TrainConfig(**{"max_steps": 12, "batch_size": 16, "learning_rate": 3e-3,
                            "warmup_steps": 2, "log_every": 1, "eval_every": 0,
                            "checkpoint_every": 0, "device": "cpu", "seed": 5, **train})
    tokens = read_vocab(data / "vocab")
    torch.manual_seed(config.seed)
    net = BertPretrainingModel(tiny_config(len(tokens), dropout, **(model or {})))
    torch.manual_seed(config.seed + 1)
    collator = PretrainingCollator(MaskingConfig(max_predictions_per_seq=5),
                                   VocabSpec.from_tokens(tokens), seed=config.seed)
    store = SampleStore(data / "samples" / "train")
    if samples is not None:
        store = FirstSamples(store, samples)
    rank, world_size = world
    batches = PretrainingBatches(store, collator,
                                 config.batch_size, config.micro_batches,
                                 seed=config.seed, rank=rank, world_size=world_size)
    # in a process group (even of one process) the trainer gathers the gradients
    joined = torch.distributed.is_initialized()
    return StepRunner(net, config, batches, device="cpu",
                   dist=Distributed(rank, world_size, initialized=joined))


def spawn_ranks(fn: Callable, args: tuple, nprocs: int) -> None:
    """`torch.multiprocessing.spawn(fn, args, nprocs)`, its processes forked from a fork
    server that imported torch and this module once (bertcore's, stopped after): spawned,
    each imported them again, ~3 s of CPU a process."""
    fork_server(["torch.distributed", __name__])
    try:
        mp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method="forkserver")
    finally:
        stop_fork_server()
