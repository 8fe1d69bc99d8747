"""Held-out metrics with fixed masks: MLM loss, accuracy and perplexity, NSP loss and accuracy.

The batches come with masks seeded once from `eval.seed` (`val_batches`), so the numbers of
two evaluations differ only because the model did. Sums and counts are accumulated over
all batches (and all processes) before dividing, so the result does not depend on the batch
size. Two baselines tell whether the model learned anything: always predicting the most
frequent masked token, and always predicting the more frequent NSP class.

Asked for (`evaluate(..., items=SequenceOutcomes())`: the evaluate and prune stages), it also
records what the model got on each sequence, from which each score has its interval
(`bertcore.common.intervals`): the sums above are these, added up.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from bertcore.common.devices import autocast
from bertcore.common.outcomes import Figure, one_run
from bertcore.model.bert import IGNORE_INDEX
from bertcore.training.config import EvalConfig, MaskingConfig
from bertcore.training.data.batches import SampleSource, eval_batches
from bertcore.training.data.masking import PretrainingCollator, VocabSpec
from bertcore.training.hardware.distributed import Distributed


@dataclass
class EvalMetrics:
    mlm_loss: float
    mlm_accuracy: float
    perplexity: float
    nsp_loss: float
    nsp_accuracy: float
    mlm_baseline_accuracy: float
    nsp_baseline_accuracy: float
    mlm_predictions: int
    sequences: int
    # zero-shot probes scored beside (pretraining's periodic evaluation): name -> figure
    probes: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, float | int]:
        """The held-out figures (the probes, if any, are `probes`)."""
        return {key: value for key, value in asdict(self).items() if key != "probes"}

    def scores(self) -> dict[str, float]:
        """What the model reached (metrics/eval.json, compared across runs)."""
        return {key: getattr(self, key) for key in SCORES}

    def context(self) -> dict[str, float | int]:
        """What the scores are read against: the baselines of a model that learned nothing,
        and how much was scored (the same for every model on the same val split)."""
        return {key: getattr(self, key) for key in CONTEXT}


SCORES = ("mlm_accuracy", "mlm_loss", "perplexity", "nsp_accuracy", "nsp_loss")
# each score as a statistic of the per-sequence columns of `SequenceOutcomes`
# (`intervals.STATISTICS`): (statistic, {its column: ours}, higher is better)
SCORE_STATISTICS = {
    "mlm_accuracy": ("ratio", {"num": "mlm_correct", "den": "mlm_predicted"}, True),
    "mlm_loss": ("ratio", {"num": "mlm_loss_sum", "den": "mlm_predicted"}, False),
    "perplexity": ("exp_ratio", {"num": "mlm_loss_sum", "den": "mlm_predicted"}, False),
    "nsp_accuracy": ("mean", {"x": "nsp_right"}, True),
    "nsp_loss": ("mean", {"x": "nsp_loss"}, False),
}
CONTEXT = ("mlm_baseline_accuracy", "nsp_baseline_accuracy", "mlm_predictions", "sequences")


# Zero-shot probes of a model as it trains: the model -> {name: figure}
Probes = Callable[[torch.nn.Module], dict[str, float]]


class ProbeSource(Protocol):
    """What pretraining is given to probe with (`bertcore.downstream.probes.during_pretraining`,
    built by the stage: training does not import the probes): `prepare` draws the probes for
    the model once (None: nothing to probe), the result scores them at each periodic
    evaluation."""

    def prepare(self, model: torch.nn.Module, device: torch.device) -> Probes | None: ...


class EvalSums:
    """The sums and counts of an evaluation, kept on the device: `add` a scored batch (no
    host read, no data-dependent shape, so the CPU never waits for the GPU), then `read` them
    once, added over all processes: each batch's sums in the order of the batches (as
    `eval_batches` deals them: batch b is process b % world_size's), whatever the number of
    processes, so the figures have the same bytes for any number of them."""

    # [mlm_loss_sum, mlm_count, mlm_correct, nsp_loss_sum, nsp_count, nsp_correct, nsp_ones]
    SIZE = 7

    def __init__(self, vocab_size: int, device: torch.device):
        self.batches: list[torch.Tensor] = []  # each batch's sums, in the order scored
        # how often each token is a target: the baseline predicts the most frequent one
        self.label_counts = torch.zeros(vocab_size, dtype=torch.float64, device=device)
        self.device = device

    def add(self, out, batch: dict[str, torch.Tensor]) -> None:
        """Add one batch's model output (`out`, with the loss sums) and labels."""
        targets = batch["mlm_targets"].flatten()
        labelled = targets != IGNORE_INDEX
        self.batches.append(torch.stack(
            [
                out.mlm_loss_sum.double(),
                out.mlm_count.double(),
                out.mlm_correct.double(),
                out.nsp_loss_sum.double(),
                out.nsp_count.double(),
                out.nsp_correct.double(),
                (batch["nsp_labels"] == 1).sum().double(),
            ]
        ))
        # index_add_ into a fixed-size tensor: bincount would size its output from the
        # largest target, a read of the device on every batch
        self.label_counts.index_add_(0, targets.clamp_min(0), labelled.double())

    def sums(self, dist: Distributed) -> torch.Tensor:
        """Every process's batches' sums, added one batch after the other in the order of
        the batches (the host waits for the device here)."""
        mine = torch.stack(self.batches).cpu() if self.batches else torch.zeros(0, self.SIZE,
                                                                                 dtype=torch.float64)
        shares = dist.all_gather_objects(mine)
        total = torch.zeros(self.SIZE, dtype=torch.float64)
        for batch in range(sum(len(share) for share in shares)):
            total += shares[batch % len(shares)][batch // len(shares)]
        return total.to(self.device)

    def read(self, dist: Distributed) -> EvalMetrics:
        """The metrics over all batches and processes (the host waits for the device here)."""
        sums = self.sums(dist)
        dist.all_reduce_sum(self.label_counts)  # whole numbers: exact in any order
        both = torch.cat([sums, self.label_counts.max()[None]]).tolist()
        (mlm_loss_sum, mlm_count, mlm_correct, nsp_loss_sum, nsp_count, nsp_correct, nsp_ones,
         most_frequent) = both
        mlm_loss = mlm_loss_sum / max(mlm_count, 1.0)
        nsp_ones_share = nsp_ones / max(nsp_count, 1.0)
        return EvalMetrics(
            mlm_loss=mlm_loss,
            mlm_accuracy=mlm_correct / max(mlm_count, 1.0),
            perplexity=math.exp(min(mlm_loss, 700.0)),
            nsp_loss=nsp_loss_sum / max(nsp_count, 1.0),
            nsp_accuracy=nsp_correct / max(nsp_count, 1.0),
            mlm_baseline_accuracy=most_frequent / max(mlm_count, 1.0),
            nsp_baseline_accuracy=(max(nsp_ones_share, 1.0 - nsp_ones_share)
                                   if nsp_count else 0.0),
            mlm_predictions=int(mlm_count),
            sequences=int(nsp_count),
        )


class SequenceOutcomes:
    """What the model got on each sequence it scored, in the order of the batches: its MLM
    predictions right (`mlm_correct`), made (`mlm_predicted`) and their summed loss
    (`mlm_loss_sum`), whether its NSP was right (`nsp_right`, 0/1) and its NSP loss
    (`nsp_loss`). `add` keeps a batch's on the device, as `EvalSums` does (no host read);
    `columns` reads them once. Batches with MLM slots (`mlm_targets` [B, P], the logits
    [B, P, V]), as `val_batches` gives them."""

    COLUMNS = ("mlm_correct", "mlm_predicted", "mlm_loss_sum", "nsp_right", "nsp_loss")

    def __init__(self) -> None:
        self._batches: list[torch.Tensor] = []  # each [B, len(COLUMNS)], float64

    def add(self, out, batch: dict[str, torch.Tensor]) -> None:
        """Add one batch's model output (`out`: the logits) and labels."""
        targets, logits = batch["mlm_targets"], out.mlm_logits  # [B, P], [B, P, V]
        labelled = targets != IGNORE_INDEX
        # as the model's summed losses: the loss in float32, the prediction on the logits as
        # they are (max's index: argmax's, the first of a tie, at half its cost on the CPU)
        mlm_loss = F.cross_entropy(logits.float().flatten(0, -2), targets.flatten(),
                                   ignore_index=IGNORE_INDEX, reduction="none")
        predicted = logits.max(dim=-1).indices
        nsp_logits, nsp_labels = out.nsp_logits, batch["nsp_labels"]
        self._batches.append(torch.stack([
            ((predicted == targets) & labelled).sum(dim=-1).double(),
            labelled.sum(dim=-1).double(),
            mlm_loss.view_as(targets).double().sum(dim=-1),
            (nsp_logits.argmax(dim=-1) == nsp_labels).double(),
            F.cross_entropy(nsp_logits.float(), nsp_labels, reduction="none").double(),
        ], dim=1))

    def columns(self) -> dict[str, np.ndarray]:
        """Each column over all sequences scored (the host waits for the device here): the
        counts as integers, the losses to the 7 significant digits the items file keeps
        (`bertcore.common.outcomes`), so an interval drawn now is the one its reader draws."""
        table = (torch.cat(self._batches).cpu().numpy() if self._batches
                 else np.zeros((0, len(self.COLUMNS))))
        columns = dict(zip(self.COLUMNS, table.T, strict=True))
        for name in ("mlm_correct", "mlm_predicted", "nsp_right"):
            columns[name] = columns[name].astype(np.int64)
        for name in ("mlm_loss_sum", "nsp_loss"):
            columns[name] = np.array([float(f"{v:.7g}") for v in columns[name].tolist()])
        return columns


def score_figure(score: str, items: str, columns: dict[str, np.ndarray]) -> Figure:
    """`score` (one of `SCORES`) as the figure of the per-sequence `columns`
    (`SequenceOutcomes.columns`) on the item set `items`."""
    statistic, reads, higher = SCORE_STATISTICS[score]
    return one_run(statistic, items, higher, **{key: columns[name] for key, name in reads.items()})


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    batches: Iterable[dict[str, torch.Tensor]],
    device: torch.device | str = "cpu",
    autocast_dtype: torch.dtype | None = None,
    dist: Distributed | None = None,
    max_batches: int | None = None,
    probes: Probes | None = None,
    items: SequenceOutcomes | None = None,
) -> EvalMetrics:
    """Score `model` (our BertPretrainingModel) on `batches`, and with `probes` probe it (this
    process alone); the model is left as it was (train or eval mode). With `dist`, each
    process scores its share of the batches and the sums are added. With `items`, what the
    model got on each sequence is added to it too (this process's sequences). The device is
    read once, at the end."""
    device = torch.device(device)
    dist = dist or Distributed()
    was_training = model.training
    model.eval()
    sums = EvalSums(model.config.vocab_size, device)
    if max_batches is not None:  # of all processes' batches: this process's share of them
        max_batches = len(range(dist.rank, max_batches, dist.world_size))
    try:
        for batch in itertools.islice(batches, max_batches):  # None: all of them
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            with autocast(device, autocast_dtype):
                out = model(**batch)
            sums.add(out, batch)
            if items is not None:
                items.add(out, batch)
    finally:
        model.train(was_training)
    metrics = sums.read(dist)
    if probes is not None:
        metrics.probes = probes(model)
    return metrics


def val_batches(store: SampleSource, masking: MaskingConfig, vocab: VocabSpec,
                config: EvalConfig, *, rank: int = 0, world_size: int = 1) -> DataLoader:
    """The batches every evaluation scores (pretraining's periodic one, `bert evaluate`,
    `bert prune`): all of `store` in order, `config.batch_size` at a time, with the masks of
    `masking` seeded by `config.seed`; with world_size > 1 this rank's share."""
    collator = PretrainingCollator(masking, vocab, seed=config.seed)
    return eval_batches(store, collator, config.batch_size, rank=rank, world_size=world_size)
