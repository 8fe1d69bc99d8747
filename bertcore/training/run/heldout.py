"""`bert evaluate`'s work: the pretrained model scored on the val split of a samples folder,
with fixed masks, at each length the folder holds (phase 1's and, with BERT's second phase,
`phase2/`'s, whose MLM slots grow with the length), and beside each score the NSP that words
alone give (`nsp_baseline.bag_of_words_nsp`, fitted on the train split beside it).

The report is two dicts, phase 1's numbers first and each longer length under `length_<N>`:
the scores (metrics/eval.json) and what they are read against (metrics/eval_details.json),
and what the model got on each val pair (metrics/eval_items.json: `heldout_items`), from
which each score has its 95% interval (`<name>_ci95` beside it). The val pairs of one length
with the masks of `eval.seed` are one item set (`val_item_set`), the same for every model
scored on them (prune's val figures too). `evaluate_pretrained` is the whole stage: it also
logs the report into the model's pretraining run.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertcore.common.devices import resolve_device, resolve_precision
from bertcore.common.errors import BertError
from bertcore.common.intervals import Estimate
from bertcore.common.outcomes import ItemSet, StageItems, items_digest
from bertcore.common.report import with_items, write_report
from bertcore.common.tracking import TrackingTarget
from bertcore.data.samples.store import SampleStore, phase2_samples
from bertcore.data.samples.verify import SamplesCheck
from bertcore.saved.pretrained import load_pretrained
from bertcore.saved.run_reports import MODEL_KEY, log_report_into, report_run, weights_sha256
from bertcore.training.data.masking import MaskingConfig, VocabSpec
from bertcore.training.evaluation.metrics import (
    SCORES,
    EvalConfig,
    EvalMetrics,
    SequenceOutcomes,
    evaluate,
    score_figure,
    val_batches,
)
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


VAL_UNIT = "val pair"  # one item of the val split's set (its masks: the set's digest)


def val_item_set(val: SampleStore, arrays_sha256: str, masking: MaskingConfig,
                 config: EvalConfig, max_seq_length: int | None) -> ItemSet:
    """The item set of the val split `val` (its arrays' `arrays_sha256`, from the samples'
    meta.json) scored with the masks of `masking` and `config.seed` at `max_seq_length`: the
    same digest for the same pairs with the same masks, whichever model, stage or batch size
    scored them."""
    digest = items_digest("val", arrays_sha256, dataclasses.asdict(masking), config.seed,
                          max_seq_length)
    return ItemSet(digest, len(val), VAL_UNIT)


@dataclass
class HeldOutSplit:
    """One length's val split, the masking it is scored with, and the train split beside it
    (None when there is none, or it is empty: no bag-of-words baseline)."""

    max_seq_length: int | None  # of its samples, as meta.json says
    val: SampleStore
    train: SampleStore | None
    masking: MaskingConfig
    val_sha256: str  # the val arrays' fingerprint (meta.json `arrays_sha256.val`)

    def item_set(self, config: EvalConfig) -> ItemSet:
        """The items this split is scored on with the masks of `config.seed`."""
        return val_item_set(self.val, self.val_sha256, self.masking, config,
                            self.max_seq_length)


def heldout_splits(samples_dir: str | Path, vocab_dir: str | Path,
                   masking: MaskingConfig) -> list[HeldOutSplit]:
    """The splits to score in `samples_dir` (built with the vocabulary in `vocab_dir`): phase
    1's and, when the samples stage built them, phase 2's, with `masking` scaled to its
    length."""
    samples_dir, verify = Path(samples_dir), SamplesCheck(vocab_dir)
    meta = verify(samples_dir)
    base = meta["max_seq_length"]
    splits = [HeldOutSplit(base, val_split(samples_dir), _train_split(samples_dir), masking,
                           meta["arrays_sha256"]["val"])]
    longer = phase2_samples(samples_dir)
    if longer is not None:
        meta = verify(longer)
        length = meta["max_seq_length"]
        splits.append(HeldOutSplit(length, SampleStore(longer / "val"), _train_split(longer),
                                   scaled_masking(masking, base, length),
                                   meta["arrays_sha256"]["val"]))
    return splits


def _train_split(samples_dir: Path) -> SampleStore | None:
    train = SampleStore(samples_dir / "train") if (samples_dir / "train").is_dir() else None
    return train if train is not None and len(train) else None


@dataclass
class HeldOutScore:
    """The model's metrics on one length's val split, the bag-of-words NSP accuracy, and what
    the model got on each val pair (`SequenceOutcomes.columns`) of the item set `items`."""

    max_seq_length: int | None
    metrics: EvalMetrics
    bag_of_words: float | None  # None without a train split to fit it on
    items: ItemSet
    outcomes: dict[str, np.ndarray]

    def context(self) -> dict[str, Any]:
        """What the scores are read against: the baselines, the counts, the bag of words."""
        context: dict[str, Any] = self.metrics.context()
        if self.bag_of_words is not None:
            context["nsp_bag_of_words_accuracy"] = self.bag_of_words
        return context


def score_heldout(model: torch.nn.Module, splits: list[HeldOutSplit], vocab: VocabSpec,
                  config: EvalConfig, device: torch.device) -> list[HeldOutScore]:
    """`model` (on `device`) scored on each split with the masks of `config.seed`, val pair
    by val pair."""
    scores = []
    for split in splits:
        outcomes = SequenceOutcomes()
        metrics = evaluate(model, val_batches(split.val, split.masking, vocab, config), device,
                           autocast_dtype=resolve_precision("auto", device), items=outcomes)
        words = bag_of_words_nsp(split.train, split.val) if split.train is not None else None
        scores.append(HeldOutScore(split.max_seq_length, metrics, words,
                                   split.item_set(config), outcomes.columns()))
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


def heldout_items(scores: list[HeldOutScore]) -> StageItems:
    """metrics/eval_items.json: each score of `heldout_report` (`length_<N>.mlm_accuracy`,
    ...) as a figure of the val pairs, phase 1's on the set `val`, each longer length's on a
    set of its own (`val_length_<N>`: other pairs, other masks)."""
    items = StageItems("eval")
    for number, score in enumerate(scores):
        prefix = "" if number == 0 else f"length_{score.max_seq_length}."
        name = "val" if number == 0 else f"val_length_{score.max_seq_length}"
        items.sets[name] = score.items
        items.figures.update({f"{prefix}{key}": score_figure(key, name, score.outcomes)
                              for key in SCORES})
    return items


@dataclass(frozen=True)
class HeldOutPaths:
    """What the evaluate stage reads and writes."""

    model_dir: str | Path  # the pretrained model, with
    samples_dir: str | Path  # the samples and
    vocab_dir: str | Path  # the vocabulary it was trained on
    out_file: str | Path  # the scores; what they are read against goes beside it


@dataclass(frozen=True)
class HeldOutOutcome:
    """What the evaluate stage scored, at each length, and each score with its interval
    (`heldout_items`' names: `mlm_accuracy`, `length_<N>.mlm_accuracy`, ...)."""

    scores: list[HeldOutScore]
    estimates: dict[str, Estimate]

    def summary(self, out_file: str | Path) -> list[str]:
        """The console's lines, each naming the length it scores at: phase 1's scores with
        their intervals against their baselines (to the same precision), then each longer
        length's."""
        first, *longer = self.scores
        metrics, words = first.metrics, first.bag_of_words
        mlm, nsp = self._of(first, "", "mlm_accuracy"), self._of(first, "", "nsp_accuracy")
        length = f" (length {first.max_seq_length})" if first.max_seq_length else ""
        lines = [
            f"evaluate{length}: MLM accuracy {mlm.text()} (most frequent token "
            f"{metrics.mlm_baseline_accuracy:.{mlm.decimals}f}), perplexity "
            f"{self._of(first, '', 'perplexity').text()}, NSP accuracy {nsp.text()} (majority "
            f"{metrics.nsp_baseline_accuracy:.{nsp.decimals}f}"
            + (f", bag of words {words:.{nsp.decimals}f}" if words is not None else "")
            + f") -> {out_file}"
        ]
        for score in longer:
            prefix = f"length_{score.max_seq_length}."
            lines.append(f"evaluate (length {score.max_seq_length}): MLM accuracy "
                         f"{self._of(score, prefix, 'mlm_accuracy').text()}, NSP accuracy "
                         f"{self._of(score, prefix, 'nsp_accuracy').text()}")
        return lines

    def _of(self, score: HeldOutScore, prefix: str, key: str) -> Estimate:
        """`score`'s `key` (the sums' value, as eval.json has it) with its interval."""
        found = self.estimates[prefix + key]
        return Estimate(getattr(score.metrics, key), found.low, found.high)


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
    items = heldout_items(scored)
    scores, context, estimates = with_items(scores, context, items)
    files = write_report(paths.out_file, "eval", scores, context, items)
    log_report_into(tracker, step, files, scores, "eval")
    return HeldOutOutcome(scored, estimates)
