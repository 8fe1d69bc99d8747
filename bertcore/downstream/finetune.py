"""Fine-tuning a sequence classifier (or regressor): the project's one fine-tuning loop, and
the `finetune` stage's check that pretraining helps a real task (`run_finetune`).

`train_classifier` runs a `Recipe` (bertcore.downstream.config): AdamW, linear warmup then
linear decay, gradient clipping, a step cap so a CPU run stays short; the loss is cross-entropy
for classes, mean squared error for a regression head (one output, as transformers'
`problem_type="regression"`). `glue` runs it per task and seed. `run_comparison` fine-tunes two
copies of `BertForSequenceClassification` with the same recipe, data order and seeds: one whose
encoder comes from the pretrained model, one from random initialisation (the control); it does
so once per seed (`finetune.seeds`), every seed on the one test split, tokenised once
(`finetune_report.py` makes the report over the seeds).
Accuracy and macro-F1 on the test split (a regression task: Pearson's and Spearman's r, as
GLUE scores STS-B) tell what pretraining bought; the majority class and a bag-of-words
regression tell what they are worth.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from bertcore.common.atomic import atomic_dir
from bertcore.common.devices import autocast, resolve_device, resolve_precision
from bertcore.common.dotted import flatten
from bertcore.common.report import result_values, write_report
from bertcore.common.schedule import linear_warmup_decay
from bertcore.common.shared import Shared
from bertcore.common.tracking import TrackingTarget
from bertcore.data.vocab.files import load_tokenizer
from bertcore.downstream.bag_of_words import bag_of_words_predictions, bag_of_words_values
from bertcore.downstream.cards import finetuned_facts
from bertcore.downstream.config import FINETUNE_JOB_MODULE, FinetuneConfig, Recipe
from bertcore.downstream.finetune_report import MODELS, FinetuneOutcome, finetune_report
from bertcore.downstream.finetune_runs import Comparison, FinetuneResult, SeedRun
from bertcore.downstream.finetune_task import FinetuneTask, finetune_task
from bertcore.downstream.metrics import correlations, scores
from bertcore.downstream.tasks import EncodedExamples
from bertcore.downstream.tracking import DownstreamTracking
from bertcore.downstream.workers import (
    PackedClassifier,
    computing_with,
    fine_tune_pool,
    fine_tune_workers,
    packed_classifier,
    sendable_errors,
    shared_encoder,
    start_fine_tune_workers,
)
from bertcore.model.bert import BertConfig, BertPretrainingModel
from bertcore.model.classifier import BertForSequenceClassification
from bertcore.model.tokenizer import require_readable, unknown_tokens
from bertcore.saved.card import write_card
from bertcore.saved.card_meta import CardMeta
from bertcore.saved.hf import export_hf_classifier
from bertcore.saved.pretrained import load_pretrained

log = logging.getLogger(__name__)


def build_classifier(
    config: BertConfig, labels: list[str], pretrained: BertPretrainingModel | None, seed: int
) -> BertForSequenceClassification:
    """The classifier from `pretrained`'s encoder, or (None) from random initialisation; the
    new weights are drawn from `seed`, so both runs get the same classifier layer. No labels:
    a regression head (one output)."""
    torch.manual_seed(seed)
    if pretrained is None:
        return BertForSequenceClassification(config, labels)
    return BertForSequenceClassification.from_pretrained_model(pretrained.cpu(), labels)


def task_loss(model: BertForSequenceClassification, logits: torch.Tensor,
              labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the classes, or for a regression head the mean squared error of its
    one output (transformers' BertForSequenceClassification does the same)."""
    if model.is_regression:
        return F.mse_loss(logits.float().squeeze(-1), labels.float())
    return F.cross_entropy(logits.float(), labels)


def train_classifier(
    model: BertForSequenceClassification,
    train: EncodedExamples,
    recipe: Recipe,
    device: torch.device,
    pad_id: int,
    *,
    name: str = "finetune",
    on_log: Callable[[int, float], None] | None = None,
    log_every: int = 10,
    bar: bool = True,
) -> tuple[int, float]:
    """Fine-tune in place; returns (steps, mean loss of the last logging window). The batch
    order depends only on the seed, so two models trained with one recipe see the same data.
    A batch pads to its longest example, so the encoder runs on a padded batch's real tokens
    alone (`unpad`): with GLUE's short sentences most of its rows would be padding. Nothing
    of the optimisation outlives it: no optimizer state, no gradients. `bar`: a progress bar
    on a terminal (none in a worker process: its bars would overwrite the others')."""
    model.to(device).train()
    total = recipe.total_steps(len(train))
    step = _Step(model, recipe, total, device)
    order_rng = np.random.default_rng(recipe.seed)
    torch.manual_seed(recipe.seed + 1)  # dropout
    steps, window = 0, 0
    window_loss = torch.zeros((), device=device)  # summed on the device, read at log steps
    last_loss = math.nan
    # disable=None: a bar only on a terminal
    progress = tqdm(total=total, desc=name, unit="step", leave=False, dynamic_ncols=True,
                    disable=None if bar else True)
    with progress:
        for examples in batch_order(len(train), recipe.batch_size, total, order_rng):
            window_loss += step(train.batch(examples, pad_id))
            steps += 1
            window += 1
            progress.update(1)
            if steps % log_every == 0 or steps == total:
                last_loss = float(window_loss) / window
                if on_log:
                    on_log(steps, last_loss)
                progress.set_postfix(loss=f"{last_loss:.3f}", refresh=False)
                window = 0
                window_loss.zero_()
    # the last step's gradients, a model's size again, outlive the loop otherwise (GLUE runs
    # dozens of fine-tunes in one process)
    model.zero_grad(set_to_none=True)
    return steps, last_loss


def batch_order(examples: int, batch_size: int, total: int, rng: np.random.Generator
                ) -> Iterator[list[int]]:
    """The examples of each of `total` steps: the epochs' batches in turn, each epoch a new
    permutation drawn from `rng` (its last batch the rest: smaller)."""
    step = 0
    while step < total:
        order = rng.permutation(examples)
        for start in range(0, examples, batch_size):
            if step >= total:
                return
            yield order[start : start + batch_size].tolist()
            step += 1


class _Step:
    """One optimizer step of a fine-tune: AdamW (fused on the CPU too, as pretraining's:
    torch's default there is its single-tensor AdamW, a fifth of a BERT-tiny step,
    benchmarks/finetune_step.py), the learning rate warmed up then decayed over `total`
    steps, the gradients clipped."""

    def __init__(self, model: BertForSequenceClassification, recipe: Recipe, total: int,
                 device: torch.device):
        self.model, self.device, self.max_grad_norm = model, device, recipe.max_grad_norm
        warmup = round(recipe.warmup_fraction * total)
        self.optimizer = torch.optim.AdamW(model.param_groups(recipe.weight_decay),
                                           lr=recipe.learning_rate, eps=1e-6, fused=True)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: linear_warmup_decay(step, warmup, total))
        self.autocast_dtype = resolve_precision("auto", device)

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """One step on a collated batch (on the CPU); its loss, on the device."""
        unpad = pads(batch)
        batch = {k: v.to(self.device) for k, v in batch.items()}
        labels = batch.pop("labels")
        with autocast(self.device, self.autocast_dtype):
            logits = self.model(**batch, unpad=unpad)
        loss = task_loss(self.model, logits, labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        return loss.detach()


def pads(batch: dict[str, torch.Tensor]) -> bool:
    """Whether a collated batch (on the CPU: no wait for a device) has padding. Unpadding pays
    only then: measured by benchmarks/finetune_step.py, 1.65x to 2.2x the padded step on
    GLUE-like batches (38% real tokens), 0.96x to 0.98x on batches without padding."""
    return not bool(batch["attention_mask"].all())


@torch.no_grad()
def predict(model: BertForSequenceClassification, data: EncodedExamples, device: torch.device,
            pad_id: int, batch_size: int = 64) -> np.ndarray:
    """Predicted class index of every example, or for a regression head its value (eval mode:
    no dropout; a padded batch's real tokens alone, as in training)."""
    was_training = model.training
    model.to(device).eval()
    predictions = []
    autocast_dtype = resolve_precision("auto", device)
    try:
        for start in range(0, len(data), batch_size):
            batch = data.batch(list(range(start, min(start + batch_size, len(data)))), pad_id)
            batch.pop("labels")
            unpad = pads(batch)
            with autocast(device, autocast_dtype):
                logits = model(**{k: v.to(device) for k, v in batch.items()}, unpad=unpad)
            values = logits.float()[:, 0] if model.is_regression else logits.argmax(dim=-1)
            predictions.append(values.cpu().numpy())
    finally:
        model.train(was_training)
    if predictions:
        return np.concatenate(predictions)
    return np.zeros(0, dtype=np.float32 if model.is_regression else np.int64)


MODEL_SOURCES = ("pretrained", "scratch")  # each seed's two fine-tunes, in this order


@dataclass(frozen=True)
class FinetuneJob:
    """One fine-tune of the comparison: the pretrained encoder's (`which`) or the scratch
    control's, with `recipe` (its seed), on the shared task; what a worker needs."""

    which: str
    recipe: Recipe
    encoder: Shared  # the pretrained model
    task: Shared  # the encoded FinetuneTask
    device: str
    pad_id: int
    threads: int
    in_worker: bool  # send the model back packed, and draw no progress bar


def fine_tune_job(job: FinetuneJob) -> tuple[FinetuneResult, list[tuple[int, float]]]:
    """One fine-tune scored on the task's test split, and its training curve (step, loss):
    a pure function of `job`. Only the pretrained fine-tune keeps its model (the one that
    may be written)."""
    with sendable_errors(job.in_worker):
        return _fine_tune(job)


def _fine_tune(job: FinetuneJob) -> tuple[FinetuneResult, list[tuple[int, float]]]:
    computing_with(job.threads)
    pretrained, task, device = job.encoder.get(), job.task.get(), torch.device(job.device)
    source = pretrained if job.which == "pretrained" else None
    model = build_classifier(pretrained.config, task.labels, source, job.recipe.seed)
    curve: list[tuple[int, float]] = []
    started = time.perf_counter()
    steps, loss = train_classifier(
        model, task.train, job.recipe, device, job.pad_id,
        name=f"finetune {job.which} (seed {job.recipe.seed})",
        on_log=lambda step, loss: curve.append((step, loss)), bar=not job.in_worker)
    predictions = predict(model, task.test, device, job.pad_id)
    test = (correlations(predictions, task.test.labels, f"finetune {job.which}")
            if model.is_regression else scores(predictions, np.asarray(task.test.labels)))
    kept = packed_classifier(model.cpu(), job.in_worker) if source else None
    return FinetuneResult(kept, test, steps, loss, time.perf_counter() - started,
                          predictions), curve


def fine_tune_seeds(pretrained: BertPretrainingModel, task: FinetuneTask,
                    recipes: list[Recipe], device: torch.device, pad_id: int,
                    on_log: Callable[[str, int, float], None], workers: int) -> list[SeedRun]:
    """Both models fine-tuned with each recipe, `workers` fine-tunes at once; the runs in
    recipe order whatever finished first, each curve logged in that order."""
    with fine_tune_pool(workers, FINETUNE_JOB_MODULE) as (run, folder):
        encoder, shared_task = shared_encoder(pretrained, folder), Shared(task, folder)
        jobs = [FinetuneJob(which, recipe, encoder, shared_task, str(device), pad_id,
                            torch.get_num_threads(), folder is not None)
                for recipe in recipes for which in MODEL_SOURCES]
        results = {}
        for job, (result, curve) in zip(jobs, run(fine_tune_job, jobs), strict=True):
            for step, loss in curve:
                on_log(f"seed_{job.recipe.seed}/{job.which}", step, loss)
            if isinstance(result.model, PackedClassifier):
                result.model = result.model.model()
            log.info("seed %d, %s: test %s (%d steps, %.1fs)", job.recipe.seed, job.which,
                     ", ".join(f"{key} {value:.4f}" for key, value in result.test.items()),
                     result.steps, result.seconds)
            results[job.recipe.seed, job.which] = result
    return [SeedRun(recipe.seed, results[recipe.seed, "pretrained"],
                    results[recipe.seed, "scratch"]) for recipe in recipes]


def run_comparison(
    pretrained: BertPretrainingModel,
    task: FinetuneTask,
    recipes: list[Recipe],
    device: torch.device,
    pad_id: int,
    on_log: Callable[[str, int, float], None],
    workers: int = 1,
) -> Comparison:
    """Both models fine-tuned with each recipe (one per seed) on the one encoded task, and the
    baselines, made once. `on_log(curve, step, train_loss)`, the curve named by the model and
    the seed (`seed_42/pretrained`). `workers`: fine-tunes at once, each in a process."""
    runs = fine_tune_seeds(pretrained, task, recipes, device, pad_id, on_log, workers)
    if task.is_regression:  # a constant guess has no correlation: no majority row
        values = bag_of_words_values(task.train, task.test)
        return Comparison(runs, None,
                          correlations(values, task.test.labels, "finetune bag of words"))
    golds = np.asarray(task.test.labels)
    majority = np.bincount(task.train.labels).argmax()  # always the most frequent class
    words = bag_of_words_predictions(task.train, task.test, len(task.labels))
    return Comparison(runs, scores(np.full(len(golds), majority), golds), scores(words, golds))


@dataclass(frozen=True)
class FinetunePaths:
    """What the finetune stage reads and writes."""

    model_dir: str | Path  # the pretrained model, with
    vocab_dir: str | Path  # the vocabulary it was trained with
    corpus_file: str | Path  # held-out sentences: the built-in tasks' text
    out_dir: str | Path  # the fine-tuned pretrained model (Hugging Face format)
    metrics_file: str | Path  # the report; its details go beside it


def run_finetune(config: FinetuneConfig, paths: FinetunePaths,
                 target: TrackingTarget | None, meta: CardMeta | None = None) -> FinetuneOutcome:
    """The finetune stage: the pretrained model against its scratch control on the task, once
    per seed, the median seed's fine-tuned pretrained model exported, the report written and
    logged (a child run of the model's pretraining run; none when `target` is None); `meta`:
    what its card says of the model it was made from."""
    device = resolve_device(config.device, setting="finetune.device")
    workers = fine_tune_workers(config.workers, "finetune.workers", device)
    start_fine_tune_workers(workers, FINETUNE_JOB_MODULE)  # their imports while the model loads
    model, _ = load_pretrained(paths.model_dir, paths.vocab_dir)
    tokenizer = load_tokenizer(paths.vocab_dir)
    task = finetune_task(config, paths.corpus_file, tokenizer,  # tokenised once for all seeds
                         model.config.max_position_embeddings)
    require_readable(*unknown_tokens(tokenizer, task.train.input_ids), paths.vocab_dir,
                     f"the training examples of {task.name}")
    recipes = config.recipes(model.config.hidden_size)
    runs = DownstreamTracking(target, paths.model_dir, "finetune",
                              flatten({"finetune": asdict(config)}))
    with runs.failing_on_error():
        result = run_comparison(model, task, recipes, device, tokenizer.token_to_id("[PAD]"),
                                on_log=runs.log_train_loss, workers=workers)
    report = finetune_report(task, result, recipes[0], config.max_seq_length)
    card = finetuned_facts(str(paths.out_dir), report.metrics, report.details,
                           {"finetune": asdict(config)}, meta)
    with atomic_dir(paths.out_dir) as staging:
        export_hf_classifier(result.median_run().pretrained.model, staging, paths.vocab_dir)
        write_card(staging, card)
    files = write_report(paths.metrics_file, "finetune", report.metrics, report.details,
                         report.items)
    runs.log_model(paths.out_dir, "text-classification", pairs=task.pairs)
    runs.finish(files, result_values({which: report.metrics[which] for which in MODELS}),
                report.details)
    return FinetuneOutcome(result, report, task.problem, task.problem_from)
