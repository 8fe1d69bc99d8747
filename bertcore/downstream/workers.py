"""The downstream stages' fine-tunes in worker processes, several at once: how many
(`fine_tune_workers`), the pool they run in (`fine_tune_pool`), the pretrained encoder they
share (`shared_encoder`), a fine-tuned model sent back (`packed_classifier`), and each worker
computing with the stage's thread count (`computing_with`).

A fine-tune is a pure function of its inputs (the weights, the examples, the recipe with its
seed, the device and the thread count: every generator it draws from is seeded from its
recipe), so it gives the same bytes in a worker as in the stage's process, and the stage takes
the results in the order of its fine-tunes, whatever finishes first (`pool.TaskRunner`): the
outputs do not depend on the number of workers. A worker that dies runs its fine-tune again
once in a new one; SIGTERM or Ctrl-C ends the workers at once (a fine-tune running is lost).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as safetensors_bytes

from bertcore.common.errors import BertError
from bertcore.common.filesystems import NoSpaceError
from bertcore.common.fork_server import fork_server
from bertcore.common.pool import TaskRunner, available_cores
from bertcore.common.shared import Shared, shared_folder
from bertcore.downstream.worker_server import FINE_TUNE_IMPORTS, stop_early_server, workers_for
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.model.classifier import BertForSequenceClassification

log = logging.getLogger(__name__)


def fine_tune_workers(requested: int, key: str, device: torch.device) -> int:
    """`requested` (the value of `key`: finetune.workers, glue.workers), or for 0 as many as
    the cores hold workers of this process's thread count (`cpu.threads`), one on a GPU.
    More than the cores hold is allowed, the outputs being the same, but warned of."""
    threads = torch.get_num_threads()
    cores = available_cores()
    if requested * threads > cores:
        log.warning("%s: %d workers of %d thread(s) each on the %d cores this stage may use "
                    "take turns on them, each with its own memory: set %s: 0 (as many as the "
                    "cores hold)", key, requested, threads, cores, key)
    return workers_for(requested, device.type == "cpu", threads)


@contextmanager
def fine_tune_pool(workers: int, job_module: str
                   ) -> Iterator[tuple[Callable[[Callable, Iterable], Iterator], Path | None]]:
    """`(run, folder)`: `run(func, tasks)` yields `func(task)` in task order, in this process
    with one worker, else in `workers` processes, forked from a server that imported
    `job_module` (func's) and FINE_TUNE_IMPORTS once; `folder` holds the `Shared` values
    their tasks read (None with one worker)."""
    preload = (job_module, *FINE_TUNE_IMPORTS)
    with (shared_folder(workers) as folder,
          TaskRunner(workers, lazy=True, long=True, preload=preload) as run):
        yield run, folder


def start_fine_tune_workers(workers: int, job_module: str) -> None:
    """With more than one worker, the server that forks them (`fine_tune_pool`'s) started
    now, unless the stage started it already (`worker_server.start_worker_server`): its
    imports run while this process loads the model and encodes the examples, and the pool's
    workers are forked at once. After the CPU's pinning (`pin_cpu`): the server's imports
    read the environment. With one, a server the stage started for nothing is stopped."""
    if workers > 1:
        fork_server((job_module, *FINE_TUNE_IMPORTS))
    else:
        stop_early_server()


@contextmanager
def sendable_errors(in_worker: bool) -> Iterator[None]:
    """In a worker, a user's mistake goes back to the stage as a plain `BertError` of the same
    line (a subclass may not rebuild from its message), a full disk as it is."""
    try:
        yield
    except NoSpaceError:
        raise
    except BertError as error:
        if not in_worker or type(error) is BertError:
            raise
        raise BertError(str(error)) from None


def computing_with(threads: int) -> None:
    """In a fine-tune: torch's intra-op threads as the stage's (a worker starts with one per
    core): the thread count is part of what the bytes depend on."""
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def shared_encoder(model: BertPretrainingModel, folder: Path | None) -> Shared:
    """The pretrained encoder for the fine-tunes of a pool: its weights go to each worker
    once, as safetensors (bit for bit, and no pickled tensor)."""
    return Shared(model, folder, pack=_encoder_bytes, unpack=_encoder_from_bytes)


def _encoder_bytes(model: BertPretrainingModel) -> tuple[BertConfig, bytes]:
    return model.config, safetensors_bytes(model.state_dict())


def _encoder_from_bytes(packed: tuple[BertConfig, bytes]) -> BertPretrainingModel:
    config, weights = packed
    model = BertPretrainingModel(config)
    model.load_state_dict(load_safetensors(weights))
    return model


class PackedClassifier:
    """A fine-tuned classifier on its way back from a worker: its weights as safetensors
    bytes (a pickled tensor would go through shared memory that the worker owns)."""

    def __init__(self, model: BertForSequenceClassification):
        self.config, self.labels = model.config, model.labels
        self.weights = safetensors_bytes(model.state_dict())

    def model(self) -> BertForSequenceClassification:
        model = BertForSequenceClassification(self.config, self.labels)
        model.load_state_dict(load_safetensors(self.weights))
        return model


def packed_classifier(model: BertForSequenceClassification | None, in_worker: bool
                      ) -> BertForSequenceClassification | PackedClassifier | None:
    """`model` as a worker sends it back (`PackedClassifier`), or itself in this process."""
    return PackedClassifier(model) if in_worker and model is not None else model
