"""`bert evaluate`'s work: the pretrained model scored on the val split of a samples folder,
with fixed masks, at each length the folder holds (phase 1's and, with BERT's second phase,
`phase2/`'s, whose MLM slots grow with the length), and beside each score the NSP that words
alone give (`nsp_baseline.bag_of_words_nsp`, fitted on the train split beside it).

The report is two dicts, phase 1's numbers first and each longer length under `length_<N>`:
the scores (metrics/eval.json) and what they are read against (metrics/eval_details.json).
`evaluate_pretrained` is the whole stage: it also logs them into the model's pretraining run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertcore.common.errors import BertError
from bertcore.common.report import write_report
from bertcore.common.tracking import TrackingTarget
from bertcore.data.samples.store import SampleStore, phase2_samples
from bertcore.data.samples.verify import SamplesCheck
from bertcore.model.devices import resolve_device, resolve_precision
from bertcore.model.pretrained import load_pretrained
from bertcore.model.run_reports import MODEL_KEY, log_report_into, report_run, weights_sha256
from bertcore.training.data.masking import MaskingConfig, VocabSpec
from bertcore.training.evaluation.metrics import EvalConfig, EvalMetrics, evaluate, val_batches
from bertcore.training.evaluation.nsp_baseline import bag_of_words_nsp
from bertcore.training.run.phases import scaled_masking

log = logging.getLogger("bert.evaluate")  # the stage's name, as its warnings have always said


def val_split(samples_dir: str | Path) -> SampleStore:
    """The val split of `samples_dir`; an empty one, with nothing to score, is a user's
    mistake."""
    val = SampleStore(Path(samples_dir) / "val")
    if not len(val):
        raise BertError(f"the val split in {samples_dir} is empty: raise corpus.val_fraction")
    return val


@dataclass
class HeldOutSplit:
    """One length's val split, the masking it is scored with, and the train split beside it
    (None when there is none, or it is empty: no bag-of-words baseline)."""

    max_seq_length: int | None  # of its samples, as meta.json says
    val: SampleStore
    train: SampleStore | None
    masking: MaskingConfig


def heldout_splits(samples_dir: str | Path, vocab_dir: str | Path,
                   masking: MaskingConfig) -> list[HeldOutSplit]:
    """The splits to score in `samples_dir` (built with the vocabulary in `vocab_dir`): phase
    1's and, when the samples stage built them, phase 2's, with `masking` scaled to its
    length."""
    samples_dir, verify = Path(samples_dir), SamplesCheck(vocab_dir)
    base = verify(samples_dir)["max_seq_length"]
    splits = [HeldOutSplit(base, val_split(samples_dir), _train_split(samples_dir), masking)]
    longer = phase2_samples(samples_dir)
    if longer is not None:
        length = verify(longer)["max_seq_length"]
        splits.append(HeldOutSplit(length, SampleStore(longer / "val"), _train_split(longer),
                                   scaled_masking(masking, base, length)))
    return splits


def _train_split(samples_dir: Path) -> SampleStore | None:
    train = SampleStore(samples_dir / "train") if (samples_dir / "train").is_dir() else None
    return train if train is not None and len(train) else None


@dataclass
class HeldOutScore:
    """The model's metrics on one length's val split, and the bag-of-words NSP accuracy."""

    max_seq_length: int | None
    metrics: EvalMetrics
    bag_of_words: float | None  # None without a train split to fit it on

    def context(self) -> dict[str, Any]:
        """What the scores are read against: the baselines, the counts, the bag of words."""
        context: dict[str, Any] = self.metrics.context()
        if self.bag_of_words is not None:
            context["nsp_bag_of_words_accuracy"] = self.bag_of_words
        return context


def score_heldout(model: torch.nn.Module, splits: list[HeldOutSplit], vocab: VocabSpec,
                  config: EvalConfig, device: torch.device) -> list[HeldOutScore]:
    """`model` (on `device`) scored on each split with the masks of `config.seed`."""
    scores = []
    for split in splits:
        metrics = evaluate(model, val_batches(split.val, split.masking, vocab, config), device,
                           autocast_dtype=resolve_precision("auto", device))
        words = bag_of_words_nsp(split.train, split.val) if split.train is not None else None
        scores.append(HeldOutScore(split.max_seq_length, metrics, words))
    return scores


def heldout_report(scores: list[HeldOutScore]) -> tuple[dict[str, Any], dict[str, Any]]:
    """metrics/eval.json and metrics/eval_details.json: phase 1's length at the top, each
    longer one under `length_<N>`."""
    first, *longer = scores
    metrics, context = first.metrics.scores(), first.context()
    for score in longer:
        metrics[f"length_{score.max_seq_length}"] = score.metrics.scores()
        context[f"length_{score.max_seq_length}"] = score.context()
    return metrics, context


@dataclass(frozen=True)
class HeldOutPaths:
    """What the evaluate stage reads and writes."""

    model_dir: str | Path  # the pretrained model, with
    samples_dir: str | Path  # the samples and
    vocab_dir: str | Path  # the vocabulary it was trained on
    out_file: str | Path  # the scores; what they are read against goes beside it


@dataclass(frozen=True)
class HeldOutOutcome:
    """What the evaluate stage scored, at each length."""

    scores: list[HeldOutScore]

    def summary(self, out_file: str | Path) -> list[str]:
        """The console's lines, each naming the length it scores at: phase 1's scores against
        their baselines, then each longer length's."""
        first, *longer = self.scores
        metrics, words = first.metrics, first.bag_of_words
        length = f" (length {first.max_seq_length})" if first.max_seq_length else ""
        lines = [
            f"evaluate{length}: MLM accuracy {metrics.mlm_accuracy:.4f} (most frequent token "
            f"{metrics.mlm_baseline_accuracy:.4f}), perplexity {metrics.perplexity:.2f}, NSP "
            f"accuracy {metrics.nsp_accuracy:.4f} (majority {metrics.nsp_baseline_accuracy:.4f}"
            + (f", bag of words {words:.4f}" if words is not None else "") + f") -> {out_file}"
        ]
        lines += [f"evaluate (length {score.max_seq_length}): MLM accuracy "
                  f"{score.metrics.mlm_accuracy:.4f}, NSP accuracy "
                  f"{score.metrics.nsp_accuracy:.4f}" for score in longer]
        return lines


def evaluate_pretrained(masking: MaskingConfig, config: EvalConfig, paths: HeldOutPaths,
                        device: str, target: TrackingTarget | None) -> HeldOutOutcome:
    """The evaluate stage: the pretrained model scored on `device` (auto, cpu, cuda, cuda:N)
    at each length of the samples, the report written and logged into the model's
    pretraining run (`eval_...` results at its last step, `eval.` tags; not when `target` is
    None)."""
    splits = heldout_splits(paths.samples_dir, paths.vocab_dir, masking)
    model, tokens = load_pretrained(paths.model_dir, paths.vocab_dir)
    tracker, step = report_run(target, Path(paths.model_dir), paths.out_file, log)
    scoring_device = resolve_device(device, setting="--device")
    scored = score_heldout(model.to(scoring_device), splits, VocabSpec.from_tokens(tokens),
                           config, scoring_device)
    scores, context = heldout_report(scored)
    context[MODEL_KEY] = weights_sha256(paths.model_dir)  # a later run of them carries it
    files = write_report(paths.out_file, "eval", scores, context)
    log_report_into(tracker, step, files, scores, context, "eval")
    return HeldOutOutcome(scored)
