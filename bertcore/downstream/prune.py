"""The prune stage's work, outside the command line: score the heads on training sequences,
prune, measure what it cost (val metrics) and saved (throughput), optionally recover with a
few pretraining steps, and build the stage's report (`prune_pretrained`: the whole stage). The
pruning itself is `bertcore.downstream.heads`.

The val figures are measured val pair by val pair (metrics/prune_items.json), on the item set
of the evaluate stage (`val_item_set`: the same pairs and masks), so each has its interval,
and what pruning cost (pruned - before, recovered - before) its paired interval: the same
pairs before and after, resampled together.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertcore.common.atomic import atomic_dir
from bertcore.common.devices import resolve_device, resolve_precision
from bertcore.common.dotted import flatten
from bertcore.common.errors import BertError
from bertcore.common.intervals import Estimate, difference, verdict
from bertcore.common.outcomes import ItemSet, StageItems
from bertcore.common.report import with_items, write_report
from bertcore.common.tracking import TrackingTarget
from bertcore.data.samples.store import SampleStore
from bertcore.data.samples.verify import SamplesCheck
from bertcore.downstream.cards import pruned_facts
from bertcore.downstream.config import PruneConfig
from bertcore.downstream.heads import (
    PruneSteps,
    head_importance,
    prune_by_importance,
    recover,
    speed_ratio,
    throughput,
)
from bertcore.downstream.tracking import DownstreamTracking
from bertcore.model.bert import BertPretrainingModel
from bertcore.saved.card import write_card
from bertcore.saved.card_meta import CardMeta
from bertcore.saved.hf import export_hf
from bertcore.saved.pretrained import load_pretrained
from bertcore.training.config import TrainConfig
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.training.evaluation.metrics import (
    SCORE_STATISTICS,
    EvalConfig,
    EvalMetrics,
    SequenceOutcomes,
    evaluate,
    score_figure,
    val_batches,
)
from bertcore.training.run.heldout import val_item_set, val_split

VAL_KEYS = ("mlm_accuracy", "mlm_loss", "nsp_accuracy")


THROUGHPUT_KINDS = ("forward_sequences_per_s", "train_step_sequences_per_s")


@dataclass
class PruneData:
    """The sequences pruning reads: training sequences score the heads and recover the model,
    the val split only measures."""

    train: SampleStore
    val: SampleStore
    vocab: VocabSpec
    masking: MaskingConfig
    eval: EvalConfig
    val_items: ItemSet  # the val split's item set with the masks of `eval.seed`


@dataclass
class PruneOutcome:
    """What a pruning run did and measured; the model itself was pruned in place. `outcomes`:
    what each model measured (before, pruned, recovered) got on each val pair
    (`SequenceOutcomes.columns`)."""

    original: BertPretrainingModel  # a copy from before
    steps: PruneSteps
    before: EvalMetrics
    pruned: EvalMetrics
    recovered: EvalMetrics | None
    speed: dict[str, dict[str, list[float]]]  # model -> kind -> sequences/s per round
    throughput_batch: dict[str, int]  # sequences and tokens of the batch timed
    seconds: dict[str, float]
    outcomes: dict[str, dict[str, np.ndarray]]
    val_items: ItemSet

    def phases(self) -> dict[str, EvalMetrics]:
        """The models measured, by phase: before, pruned and, when it ran, recovered."""
        phases = {"before": self.before, "pruned": self.pruned, "recovered": self.recovered}
        return {phase: metrics for phase, metrics in phases.items() if metrics is not None}


def run_pruning(model: BertPretrainingModel, data: PruneData, config: PruneConfig,
                train: TrainConfig, device: torch.device) -> PruneOutcome:
    """Prune `model` (on `device`) in place and measure it before and after."""
    scoring = _train_batches(data, config.batch_size, config.seed)
    # a seeded subset, fixed masks: the first single-micro-batch steps, over as many epochs
    # as it takes
    stream = (batch for epoch in itertools.count() for (batch,) in scoring.iterate(epoch))
    score_batches = list(itertools.islice(stream, config.batches))
    val = val_batches(data.val, data.masking, data.vocab, data.eval)
    autocast = resolve_precision("auto", device)
    seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(name: str) -> Iterator[None]:
        """Adds the block's wall time to `seconds[name]`."""
        started = time.perf_counter()
        try:
            yield
        finally:
            seconds[name] = round(seconds.get(name, 0.0) + (time.perf_counter() - started), 1)

    outcomes: dict[str, dict[str, np.ndarray]] = {}

    def val_metrics(m: BertPretrainingModel, measured: str) -> EvalMetrics:
        """`m`'s val metrics, and what it got on each val pair as `outcomes[measured]`."""
        with phase("val_metrics"):
            items = SequenceOutcomes()
            metrics = evaluate(m, val, device, autocast, items=items)
            outcomes[measured] = items.columns()
            return metrics

    original = copy.deepcopy(model)
    before = val_metrics(model, "before")
    with phase("importance_and_pruning"):
        steps = prune_by_importance(
            model, lambda m: head_importance(m, score_batches, device), config.fraction,
            config.iterative)
    timed = score_batches[0]
    timed_size = {"sequences": int(timed["input_ids"].shape[0]),
                  "tokens": int(timed["attention_mask"].sum())}
    # No head removed: the same model, so the same metrics and speed (timing it twice would
    # measure only the machine's noise), and nothing to recover from.
    pruned = val_metrics(model, "pruned") if steps.removed else before
    outcomes.setdefault("pruned", outcomes["before"])
    timed_models = {"before": original, "after": model} if steps.removed else {"before": original}
    with phase("throughput"):
        speed = throughput(timed_models, timed, device, config.throughput_steps)
    speed.setdefault("after", speed["before"])
    recovered = None
    if config.recovery_steps and steps.removed:
        recovery = _train_batches(data, config.batch_size, config.seed + 1)
        with phase("recovery"):
            recover(model, recovery, train, config.recovery_steps,
                    config.recovery_learning_rate, device, seed=config.seed)
        recovered = val_metrics(model, "recovered")
    return PruneOutcome(original, steps, before, pruned, recovered, speed, timed_size,
                        seconds, outcomes, data.val_items)


def prune_report(outcome: PruneOutcome, model: BertPretrainingModel, config: PruneConfig
                 ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """metrics/prune.json (what pruning cost and saved, compared across runs), its details
    (which heads went and why, the settings) and the timing (throughput before and after, the
    seconds of each phase): the one place all three are built. The timing is a measurement of
    the machine, so it goes to MLflow and the console, never into the files, which are the same
    bytes for the same params and data."""
    original = outcome.original
    total, after = sum(original.config.heads_per_layer), sum(model.config.heads_per_layer)
    phases = outcome.phases()
    metrics = {
        "heads": {"before": total, "after": after, "removed": total - after,
                  "removed_fraction": (total - after) / total},
        "val": {key: {phase: getattr(m, key) for phase, m in phases.items()}
                for key in VAL_KEYS},
        "parameters": {"before": original.num_parameters(), "after": model.num_parameters()},
        "heads_per_layer": {"before": original.config.heads_per_layer,
                            "after": model.config.heads_per_layer},
    }
    details = {
        "pruned_heads": {str(k): v for k, v in model.config.pruned_heads.items()},
        "requested_heads": outcome.steps.requested,
        "importance": outcome.steps.importance,  # per step, per layer (normalised)
        "settings": {
            "fraction": config.fraction,
            "iterative": config.iterative,
            "scored_sequences": config.batches * config.batch_size,
            "recovery_steps": config.recovery_steps if outcome.recovered else 0,  # run
            "throughput_batch": outcome.throughput_batch,
        },
    }
    timing = {
        # sequences/s, best round of each model; the speedup's spread over rounds timed side
        # by side (low..high): 1 inside it means the difference is noise
        "throughput": {kind: {"before": max(outcome.speed["before"][kind]),
                              "after": max(outcome.speed["after"][kind]),
                              **speed_ratio(outcome.speed["before"][kind],
                                            outcome.speed["after"][kind])}
                       for kind in THROUGHPUT_KINDS},
        "seconds": outcome.seconds,
    }
    return metrics, details, timing


def prune_items(outcome: PruneOutcome) -> StageItems:
    """metrics/prune_items.json: each val figure of prune.json (`val.mlm_accuracy.before`,
    ...) as a figure of the val pairs, all on the one set `val` (evaluate's)."""
    items = StageItems("prune", sets={"val": outcome.val_items})
    for key in VAL_KEYS:
        for phase in outcome.phases():
            items.figures[f"val.{key}.{phase}"] = score_figure(key, "val",
                                                               outcome.outcomes[phase])
    return items


def val_differences(items: StageItems) -> dict[str, dict[str, Estimate]]:
    """What pruning (and recovering) changed: each val figure of `items` after minus before,
    with the interval of the difference paired over the same val pairs -> key -> phase."""
    changes: dict[str, dict[str, Estimate]] = {}
    for key in VAL_KEYS:
        before = items.figures[f"val.{key}.before"].runs
        changes[key] = {phase: difference(before, items.figures[f"val.{key}.{phase}"].runs,
                                          same_items=True)
                        for phase in ("pruned", "recovered") if f"val.{key}.{phase}" in
                        items.figures}
    return changes


def differences_report(changes: dict[str, dict[str, Estimate]]) -> dict[str, Any]:
    """prune_details.json's `differences`: each change to the precision its interval
    supports, with the interval and whether it is beyond the noise (`worse`, `better`: the
    interval excludes 0) or `within noise`."""
    return {key: {phase: {"difference": found.rounded().value, "ci95": found.interval(),
                          "verdict": _verdict(key, found)}
                  for phase, found in by_phase.items()}
            for key, by_phase in changes.items()}


def _verdict(key: str, change: Estimate) -> str:
    """`worse`, `better` (the change's interval excludes 0) or `within noise`."""
    return verdict(change, SCORE_STATISTICS[key][2]).removeprefix("B ")


@dataclass(frozen=True)
class PrunePaths:
    """What the prune stage reads and writes."""

    model_dir: str | Path  # the pretrained model, with
    samples_dir: str | Path  # the samples and
    vocab_dir: str | Path  # the vocabulary it was trained on
    out_dir: str | Path  # the pruned model (Hugging Face format)
    metrics_file: str | Path  # the report; its details go beside it


@dataclass(frozen=True)
class PruneStageOutcome:
    """What the prune stage did: the pruning and its report (`metrics`, and `timing`, which is
    not in the files), each val figure with its interval (`estimates`: `val.mlm_accuracy.before`,
    ...) and what pruning changed (`changes`: `val_differences`)."""

    outcome: PruneOutcome
    config: PruneConfig
    metrics: dict[str, Any]
    timing: dict[str, Any]
    estimates: dict[str, Estimate]
    changes: dict[str, dict[str, Estimate]]

    def summary(self) -> str:
        """The heads, parameters, val MLM and NSP accuracy with their intervals and the paired
        interval of what pruning changed, and the speed, before and after, in words."""
        outcome, metrics, config = self.outcome, self.metrics, self.config
        heads = metrics["heads_per_layer"]
        if not outcome.steps.removed:  # `prune.fraction` asked for fewer than one head
            return (f"prune.fraction {config.fraction} of {metrics['heads']['before']} heads "
                    f"removes none: the model is written unchanged, with no recovery steps")
        speed = self.timing["throughput"]["train_step_sequences_per_s"]
        noise = (f" (within noise: x{speed['low']:.2f} to x{speed['high']:.2f} over rounds "
                 "timed side by side)" if speed["within_noise"] else "")
        measured = " -> ".join(self.outcome.phases())
        if self.outcome.recovered:
            measured += f" after {config.recovery_steps} steps"
        return (
            f"heads per layer {heads['before']} -> {heads['after']}, "
            f"{metrics['parameters']['before']:,} -> {metrics['parameters']['after']:,} "
            f"parameters; val ({measured}) {self._val('MLM accuracy', 'mlm_accuracy')}, "
            f"{self._val('NSP accuracy', 'nsp_accuracy')}"
            + f"; train step x{speed['speedup']:.2f}{noise}. " + TRANSFORMERS_NOTE.format(
                **metrics["parameters"])
        )

    def _val(self, name: str, key: str) -> str:
        """`MLM accuracy 0.261 [0.255, 0.267] -> 0.236 [...] -> 0.243 [...] (pruned - before
        -0.025 [-0.029, -0.020], worse; recovered - before ...)`."""
        values = []
        for phase, measured in self.outcome.phases().items():
            found = self.estimates[f"val.{key}.{phase}"]
            values.append(Estimate(getattr(measured, key), found.low, found.high).text())
        changes = "; ".join(f"{phase} - before {change.text(signed=True)}, "
                            f"{_verdict(key, change)}"
                            for phase, change in self.changes[key].items())
        return f"{name} {' -> '.join(values)} ({changes})"


def prune_pretrained(config: PruneConfig, masking: MaskingConfig, eval_config: EvalConfig,
                     train: TrainConfig, paths: PrunePaths, target: TrackingTarget | None,
                     card: CardMeta | None = None) -> PruneStageOutcome:
    """The prune stage: the pretrained model pruned (and recovered, with `train`'s optimizer
    settings), measured on the val split (`masking`, `eval_config`), exported, and its report
    written and logged (a child run of the model's pretraining run; none when `target` is
    None); `card`: what its card says of the model it was made from."""
    # the train and val splits, checked to fit the vocabulary and to fill a batch
    samples_dir = Path(paths.samples_dir)
    meta = SamplesCheck(paths.vocab_dir)(samples_dir)
    train_store, val_store = SampleStore(samples_dir / "train"), val_split(samples_dir)
    if len(train_store) < config.batch_size:
        raise BertError(f"only {len(train_store)} training samples for prune.batch_size="
                        f"{config.batch_size}: lower it")
    model, tokens = load_pretrained(paths.model_dir, paths.vocab_dir)
    if model.config.pruned_heads:
        raise BertError(f"the model in {paths.model_dir} is already pruned: prune the "
                        "pretrained model")
    device = resolve_device(config.device, setting="prune.device")
    model.to(device)
    vocab = VocabSpec.from_tokens(tokens)
    val_items = val_item_set(val_store, meta["arrays_sha256"]["val"], masking, eval_config,
                             meta["max_seq_length"])
    data = PruneData(train_store, val_store, vocab, masking, eval_config, val_items)
    runs = DownstreamTracking(target, paths.model_dir, "prune",
                              flatten({"prune": dataclasses.asdict(config)}))
    with runs.failing_on_error():
        outcome = run_pruning(model, data, config, train, device)
    metrics, details, timing = prune_report(outcome, model, config)
    items = prune_items(outcome)
    changes = val_differences(items)
    details["differences"] = differences_report(changes)
    metrics, details, estimates = with_items(metrics, details, items)
    facts = pruned_facts(str(paths.out_dir), metrics, details,
                         {"prune": dataclasses.asdict(config)}, card)
    with atomic_dir(paths.out_dir) as staging:
        export_hf(model.cpu(), staging, paths.vocab_dir)
        write_card(staging, facts)
    files = write_report(paths.metrics_file, "prune", metrics, details, items)
    runs.finish(files, _headline(outcome, metrics, timing), {**details, **timing})
    return PruneStageOutcome(outcome, config, metrics, timing, estimates, changes)


def _headline(outcome: PruneOutcome, metrics: dict[str, Any], timing: dict[str, Any]
              ) -> dict[str, float]:
    """The results MLflow gets: the final val metrics with their intervals' ends
    (`val_mlm_accuracy_ci95_low`, ...) and the speedups."""
    final = "recovered" if outcome.recovered else "pruned"
    results = {}
    for key in VAL_KEYS:
        scores = metrics["val"][key]
        results[f"val_{key}"] = scores[final]
        results[f"val_{key}_ci95_low"], results[f"val_{key}_ci95_high"] = scores[f"{final}_ci95"]
    throughputs = timing["throughput"]
    return {**results,
            "forward_speedup": throughputs["forward_sequences_per_s"]["speedup"],
            "train_step_speedup": throughputs["train_step_sequences_per_s"]["speedup"]}


# transformers 5 has no head pruning: measured (docs/prune.md), it loads the folder's zeroed heads
TRANSFORMERS_NOTE = ("transformers 5 ignores pruned_heads and loads this model at full size "
                     "({before:,} parameters, every head); the saving ({after:,}) needs "
                     "bertcore.saved.hf.load_model")


def _train_batches(data: PruneData, batch_size: int, seed: int) -> PretrainingBatches:
    """Batches of training sequences, one micro-batch a step, in the order and with the
    masks of `seed`."""
    collator = PretrainingCollator(data.masking, data.vocab, seed=seed)
    return PretrainingBatches(data.train, collator, batch_size, 1, seed=seed)

