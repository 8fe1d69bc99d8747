"""The prune stage's work, outside the command line: score the heads on training sequences,
prune, measure what it cost (val metrics) and saved (throughput), optionally recover with a
few pretraining steps, and build the stage's report (`prune_pretrained`: the whole stage). The
pruning itself is `bertcore.downstream.heads`.
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

import torch

from bertcore.common.atomic import atomic_dir
from bertcore.common.dotted import flatten
from bertcore.common.errors import BertError
from bertcore.common.report import write_report
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
from bertcore.model.card import write_card
from bertcore.model.devices import resolve_device, resolve_precision
from bertcore.model.hf import export_hf
from bertcore.model.pretrained import load_pretrained
from bertcore.training.config import TrainConfig
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.data.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.training.evaluation.metrics import EvalConfig, EvalMetrics, evaluate, val_batches
from bertcore.training.run.heldout import val_split

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


@dataclass
class PruneOutcome:
    """What a pruning run did and measured; the model itself was pruned in place."""

    original: BertPretrainingModel  # a copy from before
    steps: PruneSteps
    before: EvalMetrics
    pruned: EvalMetrics
    recovered: EvalMetrics | None
    speed: dict[str, dict[str, list[float]]]  # model -> kind -> sequences/s per round
    throughput_batch: dict[str, int]  # sequences and tokens of the batch timed
    seconds: dict[str, float]


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

    def val_metrics(m: BertPretrainingModel) -> EvalMetrics:
        with phase("val_metrics"):
            return evaluate(m, val, device, autocast)

    original = copy.deepcopy(model)
    before = val_metrics(model)
    with phase("importance_and_pruning"):
        steps = prune_by_importance(
            model, lambda m: head_importance(m, score_batches, device), config.fraction,
            config.iterative)
    timed = score_batches[0]
    timed_size = {"sequences": int(timed["input_ids"].shape[0]),
                  "tokens": int(timed["attention_mask"].sum())}
    # No head removed: the same model, so the same metrics and speed (timing it twice would
    # measure only the machine's noise), and nothing to recover from.
    pruned = val_metrics(model) if steps.removed else before
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
        recovered = val_metrics(model)
    return PruneOutcome(original, steps, before, pruned, recovered, speed, timed_size,
                        seconds)


def prune_report(outcome: PruneOutcome, model: BertPretrainingModel, config: PruneConfig
                 ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """metrics/prune.json (what pruning cost and saved, compared across runs), its details
    (which heads went and why, the settings) and the timing (throughput before and after, the
    seconds of each phase): the one place all three are built. The timing is a measurement of
    the machine, so it goes to MLflow and the console, never into the files, which are the same
    bytes for the same params and data."""
    original = outcome.original
    total, after = sum(original.config.heads_per_layer), sum(model.config.heads_per_layer)
    phases = {"before": outcome.before, "pruned": outcome.pruned, "recovered": outcome.recovered}
    metrics = {
        "heads": {"before": total, "after": after, "removed": total - after,
                  "removed_fraction": (total - after) / total},
        "val": {key: {phase: getattr(m, key) for phase, m in phases.items() if m is not None}
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
    not in the files)."""

    outcome: PruneOutcome
    config: PruneConfig
    metrics: dict[str, Any]
    timing: dict[str, Any]

    def summary(self) -> str:
        """The heads, parameters, val MLM accuracy and speed, before and after, in words."""
        outcome, metrics, config = self.outcome, self.metrics, self.config
        heads = metrics["heads_per_layer"]
        if not outcome.steps.removed:  # `prune.fraction` asked for fewer than one head
            return (f"prune.fraction {config.fraction} of {metrics['heads']['before']} heads "
                    f"removes none: the model is written unchanged, with no recovery steps")
        before, pruned, recovered = outcome.before, outcome.pruned, outcome.recovered
        speed = self.timing["throughput"]["train_step_sequences_per_s"]
        noise = (f" (within noise: x{speed['low']:.2f} to x{speed['high']:.2f} over rounds "
                 "timed side by side)" if speed["within_noise"] else "")
        return (
            f"heads per layer {heads['before']} -> {heads['after']}, "
            f"{metrics['parameters']['before']:,} -> {metrics['parameters']['after']:,} "
            f"parameters; val MLM accuracy {before.mlm_accuracy:.4f} -> "
            f"{pruned.mlm_accuracy:.4f}"
            + (f" -> {recovered.mlm_accuracy:.4f} after {config.recovery_steps} recovery steps"
               if recovered else "")
            + f"; train step x{speed['speedup']:.2f}{noise}. " + TRANSFORMERS_NOTE.format(
                **metrics["parameters"])
        )


def prune_pretrained(config: PruneConfig, masking: MaskingConfig, eval_config: EvalConfig,
                     train: TrainConfig, paths: PrunePaths, target: TrackingTarget | None
                     ) -> PruneStageOutcome:
    """The prune stage: the pretrained model pruned (and recovered, with `train`'s optimizer
    settings), measured on the val split (`masking`, `eval_config`), exported, and its report
    written and logged (a child run of the model's pretraining run; none when `target` is
    None)."""
    # the train and val splits, checked to fit the vocabulary and to fill a batch
    samples_dir = Path(paths.samples_dir)
    SamplesCheck(paths.vocab_dir)(samples_dir)
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
    data = PruneData(train_store, val_store, VocabSpec.from_tokens(tokens), masking, eval_config)
    runs = DownstreamTracking(target, paths.model_dir, "prune",
                              flatten({"prune": dataclasses.asdict(config)}))
    with runs.failing_on_error():
        outcome = run_pruning(model, data, config, train, device)
    metrics, details, timing = prune_report(outcome, model, config)
    card = pruned_facts(str(paths.out_dir), metrics, details, {"prune": dataclasses.asdict(config)})
    with atomic_dir(paths.out_dir) as staging:
        export_hf(model.cpu(), staging, paths.vocab_dir)
        write_card(staging, card)
    files = write_report(paths.metrics_file, "prune", metrics, details)
    runs.finish(files, _headline(outcome, timing), {**details, **timing})
    return PruneStageOutcome(outcome, config, metrics, timing)


def _headline(outcome: PruneOutcome, timing: dict[str, Any]) -> dict[str, float]:
    """The results MLflow gets: the final val metrics and the speedups."""
    throughputs = timing["throughput"]
    return {
        **{f"val_{key}": getattr(outcome.recovered or outcome.pruned, key) for key in VAL_KEYS},
        "forward_speedup": throughputs["forward_sequences_per_s"]["speedup"],
        "train_step_speedup": throughputs["train_step_sequences_per_s"]["speedup"],
    }


# transformers 5 has no head pruning: measured (docs/prune.md), it loads the folder's zeroed heads
TRANSFORMERS_NOTE = ("transformers 5 ignores pruned_heads and loads this model at full size "
                     "({before:,} parameters, every head); the saving ({after:,}) needs "
                     "bertcore.model.hf.load_model")


def _train_batches(data: PruneData, batch_size: int, seed: int) -> PretrainingBatches:
    """Batches of training sequences, one micro-batch a step, in the order and with the
    masks of `seed`."""
    collator = PretrainingCollator(data.masking, data.vocab, seed=seed)
    return PretrainingBatches(data.train, collator, batch_size, 1, seed=seed)

