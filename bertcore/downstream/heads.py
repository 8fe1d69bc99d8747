"""Attention-head pruning by importance (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really
Better than One?").

Each head's output is multiplied by a gate ξ_h = 1. The importance of head h is the expected
absolute gradient of the loss with respect to its gate, I_h = E_x |∂L(x)/∂ξ_h|, here over the
sequences of `batches` pretraining batches (fixed masks, no dropout); the scores are then
normalised per layer by their ℓ2 norm. One gate per sequence and head ([batch, heads]) gives
every sequence's own gradient in a single backward pass: a gate of sequence x touches only
L(x). L(x) is the sequence's share of the batch's pretraining loss (the batch loss, mean MLM
over masked tokens + mean NSP, times the batch size).

The least important heads go, across all layers, until `fraction` of all heads are gone; a
layer always keeps at least one. With `iterative`, heads go in steps of 10% of all heads with
the importance scored again after each step, as in the paper. Pruning a head removes its rows
of the query/key/value projections and its columns of the output projection: the model
really shrinks, and its config records `pruned_heads`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch

from bertcore.common.errors import require
from bertcore.model.bert import BertPretrainingModel
from bertcore.training.config import TrainConfig
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.loop.step import StepRunner
from bertcore.training.loop.trainer import Trainer, TrainResult

log = logging.getLogger(__name__)

ITERATIVE_STEP = 0.1  # share of all heads removed per step in iterative pruning (the paper's)


# ------------------------------------------------------------------------------ importance
def head_gate_gradients(
    model: BertPretrainingModel, batch: Mapping[str, torch.Tensor]
) -> list[torch.Tensor]:
    """∂L(x)/∂ξ_h for every sequence x of `batch` and head h: one [batch, heads] tensor per
    layer. The model's weights get no gradient; its mode (train/eval) is left as it is."""
    size = batch["input_ids"].shape[0]
    like = next(model.parameters())
    layers = [layer.attention for layer in model.layers]
    gates = [torch.ones(size, a.num_heads, device=like.device, dtype=like.dtype,
                        requires_grad=True) for a in layers]
    try:
        for attention, gate in zip(layers, gates, strict=True):
            attention.head_gate = gate
        out = model(**batch)
        grads = torch.autograd.grad(out.loss * size, gates)
    finally:
        for attention in layers:
            attention.head_gate = None
    return [g.detach() for g in grads]


def head_importance(
    model: BertPretrainingModel,
    batches: Iterable[Mapping[str, torch.Tensor]],
    device: torch.device | str = "cpu",
) -> list[torch.Tensor]:
    """E_x |∂L(x)/∂ξ_h| over all sequences of `batches` (no dropout): one [heads] tensor per
    layer, not normalised."""
    was_training = model.training
    model.eval()
    sums = [torch.zeros(a.attention.num_heads, dtype=torch.float64) for a in model.layers]
    count = 0
    try:
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            for total, grad in zip(sums, head_gate_gradients(model, batch), strict=True):
                total += grad.abs().sum(dim=0).double().cpu()
            count += batch["input_ids"].shape[0]
    finally:
        model.train(was_training)
    require(count > 0, "batches", count, "at least one batch to score the heads on")
    return [total / count for total in sums]


def normalise_per_layer(scores: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each layer's scores divided by their ℓ2 norm (Michel et al.)."""
    return [s / s.norm(p=2).clamp_min(1e-20) for s in scores]


# -------------------------------------------------------------------------------- pruning
def choose_heads(
    model: BertPretrainingModel, scores: list[torch.Tensor], count: int
) -> dict[int, list[int]]:
    """The `count` least important heads across layers, by original head index per layer;
    a head that is the last of its layer is skipped."""
    config = model.config
    ranked = sorted(
        (float(score), layer, config.kept_heads(layer)[position])
        for layer, layer_scores in enumerate(scores)
        for position, score in enumerate(layer_scores.tolist())
    )
    left = list(config.heads_per_layer)
    chosen: dict[int, list[int]] = {}
    for _, layer, head in ranked:
        if sum(len(h) for h in chosen.values()) >= count:
            break
        if left[layer] > 1:
            chosen.setdefault(layer, []).append(head)
            left[layer] -= 1
    return {layer: sorted(heads) for layer, heads in sorted(chosen.items())}


def prune_heads(model: BertPretrainingModel, heads: Mapping[int, list[int]]) -> None:
    """Remove `heads` (layer -> original head indices) from the model, in place: smaller
    projections, and `model.config.pruned_heads` updated."""
    config = model.config
    merged = {layer: list(h) for layer, h in config.pruned_heads.items()}
    for layer, removed in heads.items():
        merged[layer] = sorted(set(merged.get(layer, [])) | set(removed))
    new_config = dataclasses.replace(config, pruned_heads=merged)  # checks >= 1 head per layer
    for layer, removed in heads.items():
        current = config.kept_heads(layer)
        keep = [position for position, head in enumerate(current) if head not in set(removed)]
        model.layers[layer].attention.keep_heads(keep)
    model.config = new_config


@dataclass
class PruneSteps:
    """What pruning did: the heads removed at each step and the importance they were chosen by
    (normalised, one list per layer, over the heads the layer had at that step)."""

    removed: list[dict[int, list[int]]]
    importance: list[list[list[float]]]
    requested: int  # heads the fraction asked for
    possible: int  # heads that can go with one left in every layer


def prune_by_importance(
    model: BertPretrainingModel,
    score: Callable[[BertPretrainingModel], list[torch.Tensor]],
    fraction: float,
    iterative: bool = False,
) -> PruneSteps:
    """Prune `fraction` of all heads (floor), least important first; `score(model)` gives the
    raw importance of the current model's heads (re-scored after each step when iterative)."""
    config = model.config
    total = config.num_hidden_layers * config.num_attention_heads
    requested = math.floor(fraction * total + 1e-9)
    possible = total - config.num_hidden_layers
    target = min(requested, possible)
    if requested > possible:
        log.warning("pruning %d of %d heads would empty a layer: pruning %d (one head left in "
                    "each layer)", requested, total, possible)
    step = max(1, round(ITERATIVE_STEP * total)) if iterative else target
    steps = PruneSteps([], [], requested, possible)
    while (removed := total - sum(model.config.heads_per_layer)) < target:
        scores = normalise_per_layer(score(model))
        heads = choose_heads(model, scores, min(step, target - removed))
        prune_heads(model, heads)
        steps.removed.append(heads)
        steps.importance.append([s.tolist() for s in scores])
        log.info("pruned %s (heads per layer now %s)", heads, model.config.heads_per_layer)
    return steps


# ------------------------------------------------------------------------------- recovery
def recover(
    model: BertPretrainingModel,
    batches: PretrainingBatches,
    train: TrainConfig,
    steps: int,
    learning_rate: float,
    device: torch.device,
    seed: int,
) -> TrainResult:
    """`steps` more steps of pretraining (the train section's optimizer settings, a 10% warmup
    to `learning_rate`, linear decay, dropout seeded by `seed`), no evaluation and no
    checkpoints. The one place that calls the pretraining loop."""
    config = dataclasses.replace(
        train, max_steps=steps, epochs=None, batch_size=batches.global_batch_size,
        micro_batches=batches.micro_batches, learning_rate=learning_rate,
        warmup_steps=steps // 10, eval_every=0, checkpoint_every=0, log_every=max(1, steps // 10),
        nproc_per_node=1, max_restarts=0, compile=False,
    )
    trainer = StepRunner(model, config, batches, device=device)
    torch.manual_seed(seed)
    return Trainer(trainer).train()


# ------------------------------------------------------------------------------ throughput
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def throughput(
    models: Mapping[str, BertPretrainingModel],
    batch: Mapping[str, torch.Tensor],
    device: torch.device,
    steps: int,
    rounds: int = 5,
) -> dict[str, dict[str, list[float]]]:
    """Sequences per second of an eval forward (no grad) and of a training step (forward,
    backward, AdamW) for each model on the same batch, per round: {name: {kind: [rounds]}}.
    Rounds of `steps` steps alternate between the models, so round i of every model ran at
    about the same time (see `speed_ratio`). The models' weights are not changed (the training
    steps run on copies)."""
    batch = {k: v.to(device) for k, v in batch.items()}
    size = batch["input_ids"].shape[0]
    trainees = {name: copy.deepcopy(m).to(device).train() for name, m in models.items()}
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-6)
                  for name, m in trainees.items()}

    def forward(name: str) -> None:
        with torch.no_grad():
            models[name](**batch)

    def train_step(name: str) -> None:
        optimizers[name].zero_grad(set_to_none=True)
        trainees[name](**batch).loss.backward()
        optimizers[name].step()

    timings: dict[str, dict[str, list[float]]] = {n: {"forward": [], "train_step": []}
                                                  for n in models}
    modes = {name: model.training for name, model in models.items()}
    for model in models.values():
        model.to(device).eval()
    for kind, run in (("forward", forward), ("train_step", train_step)):
        for name in models:  # warm-up
            run(name)
        for _ in range(rounds):
            for name in models:
                _sync(device)
                started = time.perf_counter()
                for _ in range(steps):
                    run(name)
                _sync(device)
                timings[name][kind].append(steps * size / (time.perf_counter() - started))
    for name, model in models.items():
        model.train(modes[name])
    return {name: {f"{kind}_sequences_per_s": values for kind, values in kinds.items()}
            for name, kinds in timings.items()}


def speed_ratio(before: list[float], after: list[float]) -> dict[str, float | bool]:
    """How much faster `after` is than `before`, from rounds timed side by side (`throughput`).

    `speedup` compares the fastest rounds: other work on the machine only ever slows a round
    down, so a model's fastest round is the best estimate of its own speed. `low` and `high`
    bound the ratios of the rounds run at the same time: on a busy machine they spread, and
    when they hold 1 (some rounds faster, some slower) the difference is `within_noise`."""
    ratios = [a / b for a, b in zip(after, before, strict=True)]
    low, high = min(ratios), max(ratios)
    return {"speedup": max(after) / max(before), "low": low, "high": high,
            "within_noise": low <= 1.0 <= high}
