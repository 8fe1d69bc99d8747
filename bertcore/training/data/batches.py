"""The batches the training loop sees, for one or many processes.

Which samples make optimizer step s of epoch e is `bertcore.training.data.order`'s: a keyed
bijection on the samples, dealt into length bins (`train.length_bin_width`,
`phase2.length_bin_width`), gives each step its global batch of `batch_size` samples, from
across the whole split, in memory that does not grow with it. The global batch is cut into
`micro_batches` equal micro-batches, whatever the number of processes; rank r of world_size
gets the r-th run of micro_batches / world_size of them (a subtree of the fixed sum of their
gradients, `bertcore.training.hardware.fixed_sum`), each collated (masked, padded to its
longest) by `PretrainingCollator`. The set of samples in each optimizer step and micro-batch,
and (see masking.py) their masks, therefore depend only on (seed, epoch, step): not on the
number of processes or DataLoader workers. A position in the data is just (epoch, step),
which makes resuming exact.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from multiprocessing import connection as mp_connection
from typing import Protocol

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from bertcore.common.errors import BertError, require
from bertcore.common.processes import how_it_ended
from bertcore.training.config import require_process_count, require_whole_micro_batches
from bertcore.training.data.masking import PretrainingCollator, as_tensors
from bertcore.training.data.order import NO_BINS, EpochSteps, LengthBins, LengthSource


class SampleSource(LengthSource, Protocol):
    """What batches need from a sample store (bertcore.data.samples.store.SampleStore fits):
    what the steps need, and each sample."""

    def __getitem__(self, index: int) -> tuple[np.ndarray, int, int]: ...


class TaggedSamples(Dataset):
    """Dataset indexed by (epoch, index), or by index alone for epoch 0 (evaluation's fixed
    masks): returns the sample tagged with the two numbers that seed its masks, ready for
    PretrainingCollator."""

    def __init__(self, store: SampleSource):
        self.store = store

    def __getitem__(self, key: tuple[int, int] | int):
        epoch, index = key if isinstance(key, tuple) else (0, key)
        ids, segment_b_start, is_random_next = self.store[index]
        return epoch, index, ids, int(segment_b_start), int(is_random_next)


class PretrainingBatches:
    """Training batches for one rank: `iterate(epoch, start_step)` yields, per optimizer step,
    the list of this rank's `micro_batches / world_size` collated micro-batches, the first of
    them the step's micro-batch number `first_micro_batch`."""

    def __init__(
        self,
        store: SampleSource,
        collator: PretrainingCollator,
        global_batch_size: int,
        micro_batches: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        num_workers: int = 0,
        pin_memory: bool = False,
        bins: LengthBins = NO_BINS,
        section: str = "train",
    ):
        """`bins`: the length bins each step draws from (one: no binning); `section`: the
        params section the batch size is set in, for messages (train, phase2)."""
        require(0 <= rank < world_size, "rank", rank, f"0 <= rank < world_size={world_size}")
        require_whole_micro_batches(global_batch_size, micro_batches, f"{section}.")
        require_process_count(world_size, micro_batches, f"{section}.")
        self.steps = EpochSteps(store, bins, global_batch_size, seed)
        if self.steps.per_epoch == 0:
            raise BertError(_too_few_samples(self.steps, section))
        self.collator = collator
        self.global_batch_size = global_batch_size
        self.micro_batches = micro_batches
        self.per_rank = micro_batches // world_size  # micro-batches of each process
        self.seed = int(seed)
        self.rank = rank
        self.world_size = world_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.dataset = TaggedSamples(store)

    @property
    def steps_per_epoch(self) -> int:
        return self.steps.per_epoch

    def iterate(self, epoch: int, start_step: int = 0) -> Iterator[list[dict[str, torch.Tensor]]]:
        """Optimizer steps `start_step .. steps_per_epoch-1` of `epoch`, each as a list of this
        rank's micro-batches. Resuming at (epoch, start_step) yields exactly what an
        uninterrupted run would have seen from there on."""
        require(
            0 <= start_step <= self.steps_per_epoch,
            "start_step",
            start_step,
            f"0 <= start_step <= steps_per_epoch={self.steps_per_epoch}",
        )
        loader = DataLoader(
            self.dataset,
            batch_sampler=self._micro_batch_keys(epoch, start_step),
            collate_fn=self.collator.arrays,
            num_workers=self.num_workers,
            # Its own generator: a DataLoader otherwise draws its workers' base seed from the
            # global torch RNG, shifting the dropout stream of a resumed run.
            generator=torch.Generator().manual_seed(self.seed),
        )
        step: list[dict[str, torch.Tensor]] = []
        for micro_batch in TensorBatches(loader, self.pin_memory):
            step.append(micro_batch)
            if len(step) == self.per_rank:
                yield step
                step = []

    def _micro_batch_keys(self, epoch: int, start_step: int) -> Iterator[list[tuple[int, int]]]:
        """This rank's micro-batches of (epoch, index) keys from `start_step` on, lazily, so a
        huge epoch is never materialised as Python lists: of each global batch, the rank's
        run of `per_rank` equal micro-batches."""
        micro = self.global_batch_size // self.micro_batches
        for global_batch in self.steps.batches(epoch, start_step):
            for m in range(self.first_micro_batch, self.first_micro_batch + self.per_rank):
                part = global_batch[m * micro : (m + 1) * micro]
                yield [(epoch, index) for index in part.tolist()]

    @property
    def first_micro_batch(self) -> int:
        """The number, within each step, of this rank's first micro-batch."""
        return self.rank * self.per_rank


class DataWorkerDied(BertError):
    """A DataLoader worker process died (killed: out of memory, `kill -9`): its batches are
    lost. Raised where the next batch is awaited, between two steps."""


class TensorBatches:
    """A DataLoader of batches collated as numpy arrays (`PretrainingCollator.arrays`), each
    yielded as tensors (`as_tensors`); re-iterable, with the loader's len(). A worker that
    dies is `DataWorkerDied` where the next batch is awaited."""

    def __init__(self, loader: DataLoader, pin_memory: bool = False):
        self.loader = loader
        self.pin_memory = pin_memory

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        watch = WorkerWatch(_iterate_without_sigchld_handler(self.loader))
        try:
            for arrays in watch:
                yield as_tensors(arrays, self.pin_memory)
        finally:
            watch.close()


class WorkerWatch:
    """A DataLoader iterator whose worker processes a thread watches, so that a dead one
    stops the wait for a batch (`DataWorkerDied`). torch's own check (every 5 s, while no
    message has begun) misses a worker killed while it sends a batch: the start of its
    message is in the pipe, and the read of the rest waits for ever (the other workers hold
    the pipe open). The thread wakes the main thread out of that read with SIGCHLD, whose
    handler, set only while a batch is awaited, raises; a death during a step is raised
    when the next batch is asked for. Off the main thread (no handler can be set there) only
    torch's check runs."""

    POLL_SECONDS = 0.5  # how soon the thread ends once the iteration has

    def __init__(self, batches: Iterator):
        self.batches = batches
        self.workers = list(getattr(batches, "_workers", ()))
        self.dead: list = []
        self._closed = threading.Event()
        self._main = threading.main_thread()
        self._watched = bool(self.workers) and threading.current_thread() is self._main
        if self._watched:
            threading.Thread(target=self._watch, name="dataloader-workers", daemon=True).start()

    def __iter__(self) -> WorkerWatch:
        return self

    def __next__(self):
        try:
            return self._next_awaited() if self._watched else next(self.batches)
        except DataWorkerDied:
            self._end_survivors()
            raise
        except RuntimeError as error:  # torch's "DataLoader worker (pid(s) N) exited ..."
            dead = [w for w in self.workers if w.exitcode not in (None, 0)]
            if not dead:
                raise
            self._end_survivors()
            raise DataWorkerDied(_died(dead)) from error

    def close(self) -> None:
        self._closed.set()

    def _next_awaited(self):
        """The next batch, with SIGCHLD raising while it is awaited."""
        with _sigchld_kept():
            signal.signal(signal.SIGCHLD, self._raise_if_dead)
            self._raise_if_dead()
            return next(self.batches)

    def _raise_if_dead(self, *signal_args) -> None:
        if self.dead:
            raise DataWorkerDied(_died(self.dead))

    def _end_survivors(self) -> None:
        """The iteration is given up: its other workers end now, not after torch's wait of
        5 s for each (they may be blocked on the pipe the dead one broke)."""
        self.close()
        for worker in self.workers:
            if worker.is_alive():
                worker.kill()

    def _watch(self) -> None:
        by_sentinel = {w.sentinel: w for w in self.workers}
        while not self._closed.is_set():
            ended = mp_connection.wait(list(by_sentinel), timeout=self.POLL_SECONDS)
            # torch ends its workers itself when the iteration ends or is dropped
            if self._closed.is_set() or getattr(self.batches, "_shutdown", False):
                return
            dead = [w for w in (by_sentinel[s] for s in ended) if _exit_code(w) != 0]
            if dead:
                self.dead = dead
                signal.pthread_kill(self._main.ident, signal.SIGCHLD)
                return


def _exit_code(worker) -> int | None:
    """A worker's exit code once it has ended (its sentinel is ready a moment before)."""
    worker.join(timeout=1)
    return worker.exitcode


@contextlib.contextmanager
def _sigchld_kept() -> Iterator[None]:
    """The SIGCHLD handler of before, set again on exit (None from `signal.getsignal`, a
    handler not set from Python, taken as the default)."""
    previous = signal.getsignal(signal.SIGCHLD)
    try:
        yield
    finally:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL if previous is None else previous)


def _died(workers: list) -> str:
    """Which DataLoader workers died, and how."""
    return "DataLoader worker process " + ", ".join(
        f"{w.pid} ({how_it_ended(w.exitcode)})" for w in workers) + " died"


def _iterate_without_sigchld_handler(loader: DataLoader) -> Iterator:
    """`iter(loader)`, without the SIGCHLD handler torch installs (once per process) with its
    first worker: it raises wherever the main thread is when a worker dies, in the middle
    of an optimizer step too. Without it the death is found where the next batch is
    awaited (`WorkerWatch`), with the last step whole."""
    if threading.current_thread() is not threading.main_thread():
        return iter(loader)  # torch sets no handler there either
    with _sigchld_kept():
        return iter(loader)


def _too_few_samples(steps: EpochSteps, section: str) -> str:
    """Why an epoch of `steps` has no step, and which params to change."""
    count, size = len(steps.store), steps.batch_size
    if count < size or steps.bins.count == 1:
        return (f"only {count} training samples for a batch of {size}: lower "
                f"{section}.batch_size, or make more: raise samples.dupe_factor (each pass "
                "over the train split pairs it anew) or add text to corpus.source")
    return (f"no length bin of the {count} training samples holds a batch of {size} (the "
            f"fullest of {section}.length_bin_width={steps.bins.width} holds "
            f"{int(steps.bin_sizes.max())}): lower {section}.batch_size or raise "
            f"{section}.length_bin_width (null: no bins)")


def eval_batches(
    store: SampleSource,
    collator: PretrainingCollator,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    num_workers: int = 0,
) -> TensorBatches:
    """All samples in order, with fixed masks (seeded by the collator's seed, as of epoch 0),
    so every evaluation scores the same positions. Re-iterable, with len(); with
    world_size > 1 each rank gets a disjoint share of the batches."""
    # consecutive batches of indices (the last may be short); rank r takes every
    # world_size-th batch starting at r
    starts = range(0, len(store), batch_size)[rank::world_size]
    batches = [range(start, min(start + batch_size, len(store))) for start in starts]
    return TensorBatches(DataLoader(
        TaggedSamples(store),
        batch_sampler=batches,
        collate_fn=collator.arrays,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(0),  # leaves the global torch RNG alone
    ))

