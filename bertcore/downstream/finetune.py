"""Fine-tuning a sequence classifier: the check that pretraining helps a real task.

`run_comparison` fine-tunes two copies of `BertForSequenceClassification` with the same
budget, data order and seeds: one whose encoder comes from the pretrained model, one from
random initialisation (the control). The recipe is the usual GLUE one (Cramming's defaults):
AdamW, batch 16, 5 epochs, 10% linear warmup then linear decay, gradient clipping at 1.0, with
a step cap so a CPU run stays short, and a learning rate fit for the model's size
(AUTO_LEARNING_RATES). Accuracy and macro-F1 on the test split tell what pretraining bought;
the majority class and a bag-of-words regression tell what they are worth.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from bertcore.common.validation import Allowed, Int, checked, integer, number, params_section, text
from bertcore.downstream.bag_of_words import bag_of_words_predictions
from bertcore.downstream.builtin_tasks import BUILTIN_TASKS
from bertcore.downstream.tasks import EncodedExamples
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.model.classifier import BertForSequenceClassification
from bertcore.training.devices import Device, autocast, resolve_precision
from bertcore.training.schedule import linear_warmup_decay

log = logging.getLogger(__name__)


# finetune.learning_rate: auto, by hidden size. The GLUE recipe's 4e-5 (BERT-base, Cramming) is
# far too low for a 2-layer model. Turc et al. (2019) searched rates per miniature size (3e-4,
# 1e-4, 5e-5, 3e-5); measured here on BERT-tiny, the top of their grid gave the pretrained model
# its best: builtin:same-document 0.582 at 3e-4 vs 0.550 at 1e-3, a 10-topic set 0.898 vs 0.906
# (docs/finetune.md). Between tiny and base, their grid's 1e-4 (not measured here).
AUTO_LEARNING_RATES: tuple[tuple[int | None, float], ...] = ((128, 3e-4), (512, 1e-4), (None, 4e-5))


@params_section
class FinetuneConfig:
    """The `finetune:` section of params.yaml."""

    # a built-in task, or a .jsonl / .csv / .tsv file
    data: checked(str, lambda data: bool(data.strip()) and (not data.startswith("builtin:")
                                                            or data in BUILTIN_TASKS),
                  f"one of {', '.join(BUILTIN_TASKS)}, or a .jsonl/.csv/.tsv file"
                  ) = "builtin:same-document"
    test_data: str | None = None  # null: a seeded split of `data` by test_fraction
    test_fraction: number(gt=0, lt=1) = 0.2
    text_field: text(min_length=1, allowed="a field name") = "text"
    text_pair_field: str | None = None  # a second text: sentence-pair classification
    label_field: text(min_length=1, allowed="a field name") = "label"
    max_seq_length: integer(ge=8) = 128  # longer inputs are truncated (counted in the metrics)
    # auto: by the model's width (AUTO_LEARNING_RATES)
    learning_rate: Annotated[number(gt=0) | Literal["auto"],
                             Allowed("auto or a number > 0")] = "auto"
    batch_size: integer(ge=1) = 16
    epochs: number(gt=0) = 5.0
    # cap on the optimizer steps (CPU); null: no cap
    max_steps: integer(ge=1, allowed="null or an integer >= 1") | None = 1000
    warmup_fraction: number(ge=0, lt=1) = 0.1
    weight_decay: number(ge=0) = 0.01
    max_grad_norm: number(gt=0) = 1.0
    seed: Int = 42
    device: Device = "auto"

    def learning_rate_for(self, model: BertConfig) -> float:
        """The configured rate, or for `auto` the one of AUTO_LEARNING_RATES that fits the
        model's hidden size."""
        if self.learning_rate != "auto":
            return float(self.learning_rate)
        return next(rate for width, rate in AUTO_LEARNING_RATES
                    if width is None or model.hidden_size <= width)

    def total_steps(self, train_examples: int) -> int:
        steps = math.ceil(self.epochs * math.ceil(train_examples / self.batch_size))
        return min(steps, self.max_steps) if self.max_steps else steps


@dataclass
class Scores:
    accuracy: float
    macro_f1: float

    def to_dict(self) -> dict[str, float]:
        return {"accuracy": self.accuracy, "macro_f1": self.macro_f1}


def scores(predictions: np.ndarray, labels: np.ndarray, num_classes: int) -> Scores:
    """Accuracy, and macro-F1: the mean over classes of 2TP / (2TP + FP + FN), over the classes
    that occur in the labels or the predictions."""
    f1s = []
    for c in range(num_classes):
        tp = int(np.sum((predictions == c) & (labels == c)))
        fp = int(np.sum((predictions == c) & (labels != c)))
        fn = int(np.sum((predictions != c) & (labels == c)))
        if tp + fp + fn:
            f1s.append(2 * tp / (2 * tp + fp + fn))
    accuracy = float(np.mean(predictions == labels)) if len(labels) else 0.0
    return Scores(accuracy, float(np.mean(f1s)) if f1s else 0.0)


@dataclass
class FinetuneResult:
    model: BertForSequenceClassification
    test: Scores
    steps: int
    final_train_loss: float
    seconds: float


def build_classifier(
    config: BertConfig, labels: list[str], pretrained: BertPretrainingModel | None, seed: int
) -> BertForSequenceClassification:
    """The classifier from `pretrained`'s encoder, or (None) from random initialisation; the
    new weights are drawn from `seed`, so both runs get the same classifier layer."""
    torch.manual_seed(seed)
    if pretrained is None:
        return BertForSequenceClassification(config, labels)
    return BertForSequenceClassification.from_pretrained_model(pretrained.cpu(), labels)


def train_classifier(
    model: BertForSequenceClassification,
    train: EncodedExamples,
    config: FinetuneConfig,
    device: torch.device,
    pad_id: int,
    *,
    name: str = "finetune",
    on_log: Callable[[int, float], None] | None = None,
    log_every: int = 10,
) -> tuple[int, float]:
    """Fine-tune in place; returns (steps, mean loss of the last logging window). The batch
    order depends only on the seed, so two models trained with one config see the same data."""
    model.to(device).train()
    total = config.total_steps(len(train))
    warmup = round(config.warmup_fraction * total)
    optimizer = torch.optim.AdamW(model.param_groups(config.weight_decay),
                                  lr=config.learning_rate_for(model.config), eps=1e-6,
                                  fused=device.type == "cuda" or None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: linear_warmup_decay(step, warmup, total))
    autocast_dtype = resolve_precision("auto", device)
    order_rng = np.random.default_rng(config.seed)
    torch.manual_seed(config.seed + 1)  # dropout
    step, window = 0, 0
    window_loss = torch.zeros((), device=device)  # summed on the device, read at log steps
    last_loss = math.nan
    # disable=None: a bar only on a terminal
    bar = tqdm(total=total, desc=name, unit="step", leave=False, dynamic_ncols=True, disable=None)
    with bar:
        while step < total:
            order = order_rng.permutation(len(train))
            for start in range(0, len(order), config.batch_size):
                if step >= total:
                    break
                batch = train.batch(order[start : start + config.batch_size].tolist(), pad_id)
                batch = {k: v.to(device) for k, v in batch.items()}
                labels = batch.pop("labels")
                with autocast(device, autocast_dtype):
                    logits = model(**batch)
                loss = F.cross_entropy(logits.float(), labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                step += 1
                bar.update(1)
                window += 1
                window_loss += loss.detach()
                if step % log_every == 0 or step == total:
                    last_loss = float(window_loss) / window
                    if on_log:
                        on_log(step, last_loss)
                    bar.set_postfix(loss=f"{last_loss:.3f}", refresh=False)
                    window = 0
                    window_loss.zero_()
    return step, last_loss


@torch.no_grad()
def predict(model: BertForSequenceClassification, data: EncodedExamples, device: torch.device,
            pad_id: int, batch_size: int = 64) -> np.ndarray:
    """Predicted class index of every example (eval mode: no dropout)."""
    was_training = model.training
    model.to(device).eval()
    predictions = []
    autocast_dtype = resolve_precision("auto", device)
    try:
        for start in range(0, len(data), batch_size):
            batch = data.batch(list(range(start, min(start + batch_size, len(data)))), pad_id)
            batch.pop("labels")
            with autocast(device, autocast_dtype):
                logits = model(**{k: v.to(device) for k, v in batch.items()})
            predictions.append(logits.argmax(dim=-1).cpu().numpy())
    finally:
        model.train(was_training)
    return np.concatenate(predictions) if predictions else np.zeros(0, dtype=np.int64)


def finetune_and_score(
    model: BertForSequenceClassification,
    train: EncodedExamples,
    test: EncodedExamples,
    config: FinetuneConfig,
    device: torch.device,
    pad_id: int,
    **kwargs,
) -> FinetuneResult:
    started = time.perf_counter()
    steps, loss = train_classifier(model, train, config, device, pad_id, **kwargs)
    predictions = predict(model, test, device, pad_id)
    result = scores(predictions, np.asarray(test.labels), len(model.labels))
    return FinetuneResult(model.cpu(), result, steps, loss, time.perf_counter() - started)


@dataclass
class Comparison:
    pretrained: FinetuneResult
    scratch: FinetuneResult
    majority: Scores  # the baselines: always the most frequent class,
    bag_of_words: Scores  # and a TF-IDF logistic regression (no model, no pretraining)

    def gain(self) -> dict[str, float]:
        """What pretraining bought: pretrained minus scratch."""
        a, b = self.pretrained.test, self.scratch.test
        return {"accuracy": a.accuracy - b.accuracy, "macro_f1": a.macro_f1 - b.macro_f1}


def run_comparison(
    pretrained: BertPretrainingModel,
    labels: list[str],
    train: EncodedExamples,
    test: EncodedExamples,
    config: FinetuneConfig,
    device: torch.device,
    pad_id: int,
    on_log: Callable[[str, int, float], None] | None = None,
) -> Comparison:
    """Fine-tune the pretrained encoder and, with the same budget, data order and seeds, the
    same architecture from random initialisation; score both on `test`.
    `on_log(which, step, train_loss)` with which = "pretrained" or "scratch"."""
    results = {}
    for which, source in (("pretrained", pretrained), ("scratch", None)):
        model = build_classifier(pretrained.config, labels, source, config.seed)

        def log_step(step: int, loss: float, which: str = which) -> None:
            if on_log:
                on_log(which, step, loss)

        results[which] = finetune_and_score(model, train, test, config, device, pad_id,
                                            name=f"finetune {which}", on_log=log_step)
        log.info("%s: test accuracy %.4f, macro-F1 %.4f (%d steps, %.1fs)", which,
                 results[which].test.accuracy, results[which].test.macro_f1,
                 results[which].steps, results[which].seconds)
    bag_of_words = scores(bag_of_words_predictions(train, test, len(labels)),
                          np.asarray(test.labels), len(labels))
    return Comparison(results["pretrained"], results["scratch"],
                      majority_scores(train, test, len(labels)), bag_of_words)


def majority_scores(train: EncodedExamples, test: EncodedExamples, num_classes: int) -> Scores:
    """Always predicting the most frequent training class."""
    majority = int(np.bincount(train.labels, minlength=num_classes).argmax())
    return scores(np.full(len(test), majority), np.asarray(test.labels), num_classes)


def finetune_report(task: str, description: str, result: Comparison, labels: list[str],
                    train, test, config: FinetuneConfig) -> tuple[dict, dict]:
    """metrics/finetune.json (the test scores, compared across runs) and its details (what
    they were measured on and against): the one place both are built."""
    metrics = {
        "task": task,  # short: a column of `dvc exp show`
        "pretrained": result.pretrained.test.to_dict(),
        "scratch": result.scratch.test.to_dict(),
        "gain": result.gain(),  # pretrained minus scratch: what pretraining bought
    }
    details = {
        "majority_class": result.majority.to_dict(),  # the baselines
        "bag_of_words": result.bag_of_words.to_dict(),
        "data": {
            "description": description,
            "labels": labels,
            "train_examples": len(train),
            "test_examples": len(test),
            "truncated": {"train": train.truncated, "test": test.truncated},
            "max_seq_length": config.max_seq_length,
        },
        "training": {
            "learning_rate": config.learning_rate_for(result.pretrained.model.config),
            "steps": result.pretrained.steps,
            "final_train_loss": {"pretrained": result.pretrained.final_train_loss,
                                 "scratch": result.scratch.final_train_loss},
        },  # no seconds: the report is the same bytes on any machine (the log has them)
    }
    return metrics, details
