"""All the probes of `probe:` over one model, into one report: the numbers runs are compared
on (metrics, each with its 95% interval over the probe's items), what they are read against
(details: baselines, counts, answers not counted), each item's outcome behind each figure
(`probe_items.py`: metrics/probe_items.json) and each item's scores (one JSON Lines file per
probe, so that a user sees which fail). `probe_model` is the whole stage: it also logs the
report into the model's pretraining run."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertcore.common.atomic import atomic_dir, require_own_folder
from bertcore.common.devices import resolve_device
from bertcore.common.errors import BertError
from bertcore.common.intervals import Estimate
from bertcore.common.outcomes import StageItems
from bertcore.common.report import with_items, write_report
from bertcore.common.tracking import TrackingTarget
from bertcore.downstream.probes.builtin import REPLACED, SWAPPED, builtin_probes
from bertcore.downstream.probes.cloze import cloze_report, read_cloze, score_cloze
from bertcore.downstream.probes.config import ProbeConfig
from bertcore.downstream.probes.frequencies import count_train
from bertcore.downstream.probes.masked_lm import MaskedLM
from bertcore.downstream.probes.minimal_pairs import (
    pair_report,
    read_minimal_pairs,
    score_pairs,
)
from bertcore.downstream.probes.pll import NAMES, SCORINGS
from bertcore.downstream.probes.probe_items import add_cloze, add_pairs
from bertcore.model.tokenizer import (
    require_own_tokenizer,
    require_readable,
    tokenizer_folder,
    unknown_tokens,
)
from bertcore.saved.run_reports import MODEL_KEY, log_report_into, report_run, weights_sha256
from bertcore.saved.trained_model import load_model_and_tokenizer

log = logging.getLogger("bert.probe")  # the stage's name, as its warnings have always said

BUILTIN_PAIRS = {SWAPPED: "swapped_pairs", REPLACED: "replaced_pairs"}
# What a score on BLiMP (all 67 paradigms, 67,000 pairs) is read against: BLiMP's own paper
# (Warstadt et al. 2020, Table 3, overall accuracy), beside the unigram count measured here
BLIMP_PAPER = {"source": "Warstadt et al. 2020 (BLiMP), all 67 paradigms", "5-gram": 0.612,
               "LSTM": 0.698, "Transformer-XL": 0.696, "GPT-2": 0.815, "humans": 0.886}


@dataclass
class ProbeReport:
    metrics: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    items: dict[str, list[dict]] = field(default_factory=dict)  # file name -> rows
    outcomes: StageItems = field(default_factory=lambda: StageItems("probe"))  # per figure


def run_probes(lm: MaskedLM, config: ProbeConfig, val_file: str | Path,
               train_file: str | Path, tokenizer_dir: str | Path = "the model's folder"
               ) -> ProbeReport:
    """The built-in probes (unless `builtin_sentences` is 0) and the user's files, if any.
    `tokenizer_dir`: where `lm`'s tokenizer is from, named when it cannot read the text."""
    if not config.builtin_sentences and not (config.minimal_pairs or config.cloze):
        raise BertError("probe.builtin_sentences is 0 and neither probe.minimal_pairs nor "
                        "probe.cloze is set: there is nothing to probe")
    # read the user's files first: a mistake in them stops before anything is scored
    pairs = read_minimal_pairs(config.minimal_pairs) if config.minimal_pairs else None
    cloze = read_cloze(config.cloze) if config.cloze else None
    counts = count_train(train_file, lm)
    # stop before scoring when the tokenizer reads most of the probes' text as [UNK]: the
    # train split (the built-in probes' corpus) and each of the user's files
    require_readable(int(counts.tokens[lm.unk_id]) if lm.unk_id is not None else 0,
                     int(counts.tokens.sum()), tokenizer_dir, f"the train split {train_file}")
    for texts, key in (([t for p in pairs or () for t in (p.good, p.bad)], "minimal_pairs"),
                       ([item.text for item in cloze or ()], "cloze")):
        encoded = (e.ids for e in lm.tokenizer.encode_batch(texts, add_special_tokens=False))
        require_readable(*unknown_tokens(lm.tokenizer, encoded), tokenizer_dir,
                         f"probe.{key} {getattr(config, key)}")
    report = ProbeReport()
    if config.builtin_sentences:
        _builtin(report, lm, config, val_file, counts)
    if pairs is not None:
        scored = score_pairs(lm, pairs, counts)
        report.metrics["minimal_pairs"], details = pair_report(scored, config.scoring)
        report.details["minimal_pairs"] = {"from": config.minimal_pairs, **details,
                                           "blimp_paper": BLIMP_PAPER}
        report.items["minimal_pairs.jsonl"] = [s.row(config.scoring) for s in scored]
        add_pairs(report.outcomes, "minimal_pairs", scored, "minimal pair", config.scoring)
    if cloze is not None:
        scored = score_cloze(lm, cloze)
        report.metrics["cloze"], details = cloze_report(scored, counts, lm)
        report.details["cloze"] = {"from": config.cloze, **details}
        report.items["cloze.jsonl"] = [s.row(lm) for s in scored]
        add_cloze(report.outcomes, "cloze", scored, "cloze item")
    report.details["scoring"] = config.scoring  # the pairs' headline `accuracy`
    report.details["frequencies"] = {"from": str(train_file), "bytes_read": counts.bytes_read,
                                     "tokens": int(counts.tokens.sum()),
                                     "distinct_words": len(counts.words)}
    return report


def _builtin(report: ProbeReport, lm: MaskedLM, config: ProbeConfig, val_file: str | Path,
             counts) -> None:
    probes = builtin_probes(val_file, lm, counts, config.builtin_sentences, config.seed)
    scored_cloze = score_cloze(lm, probes.cloze, "built-in cloze")
    metrics, details = cloze_report(scored_cloze, counts, lm)
    del details["groups"]  # one group
    built = {"cloze": metrics}
    chosen_by = {"builtin_sentences": config.builtin_sentences, "seed": config.seed}
    add_cloze(report.outcomes, "builtin.cloze", scored_cloze, "held-out word cloze item",
              chosen_by)
    about = {"from": str(val_file), "eligible_sentences": probes.eligible,
             "drawn_sentences": probes.drawn, "seed": config.seed, "cloze": details}
    scored_pairs = score_pairs(lm, probes.pairs, counts, "built-in pairs")
    for group, name in BUILTIN_PAIRS.items():
        of_group = [s for s in scored_pairs if s.pair.group == group]
        built[name], details = pair_report(of_group, config.scoring)
        del details["groups"]
        add_pairs(report.outcomes, f"builtin.{name}", of_group, f"{group} pair",
                  config.scoring, chosen_by)
        about[name] = details
    report.metrics["builtin"], report.details["builtin"] = built, about
    report.items["builtin_cloze.jsonl"] = [s.row(lm) for s in scored_cloze]
    report.items["builtin_pairs.jsonl"] = [s.row(config.scoring) for s in scored_pairs]


# the per-item files, one per probe (the user's only when probe.minimal_pairs, probe.cloze)
ITEM_FILES = ["builtin_cloze.jsonl", "builtin_pairs.jsonl", "minimal_pairs.jsonl", "cloze.jsonl"]


def write_items(folder: str | Path, items: dict[str, list[dict]]) -> None:
    """The folder of per-item files, written whole (only this run's files in it)."""
    with atomic_dir(folder, layout=ITEM_FILES) as staging:  # what an earlier run wrote
        for name, rows in items.items():
            with (Path(staging) / name).open("w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


@dataclass(frozen=True)
class ProbePaths:
    """What the probe stage reads and writes."""

    model_dir: str  # the pretrained model, with
    vocab_dir: str  # its vocabulary (both unless `probe.model` names another BERT folder)
    val_file: str | Path  # the built-in probes' sentences
    train_file: str | Path  # the frequency baselines' counts
    out_file: str | Path  # the scores; what they are read against goes beside it
    items_dir: str | Path  # each probe's items with their scores


@dataclass(frozen=True)
class ProbeOutcome:
    """What the probe stage wrote: the scores, what they are read against and each score's
    95% interval (dotted name under `probe` -> its estimate)."""

    metrics: dict
    details: dict
    estimates: dict[str, Estimate] = field(default_factory=dict)

    def summary(self) -> list[str]:
        """The console's lines: each probe's figure with its interval, beside its baseline
        (to the figure's precision); a figure over no item reads null, as
        metrics/probe.json holds it."""
        metrics, details = self.metrics, self.details
        lines = []
        if "builtin" in metrics:
            about = details["builtin"]
            lines.append(f"probe: held-out word cloze ({about['cloze']['items']} items): "
                         f"{self._cloze('builtin.cloze', about['cloze'])}")
            lines.append(
                f"probe: held-out sentences by {NAMES[details['scoring']]}, against two "
                "adjacent words swapped "
                f"{self._pairs('builtin.swapped_pairs', about['swapped_pairs'])}; against a "
                f"word of close frequency "
                f"{self._pairs('builtin.replaced_pairs', about['replaced_pairs'])}")
        if "minimal_pairs" in metrics:
            paper = ", ".join(f"{name} {value}" for name, value in BLIMP_PAPER.items()
                              if name != "source")
            about = details["minimal_pairs"]
            lines.append(f"probe: minimal pairs {self._pairs('minimal_pairs', about)}, "
                         f"{len(about['groups'])} groups (on all of BLiMP, its paper: {paper})")
        if "cloze" in metrics:
            about = details["cloze"]
            lines.append(
                f"probe: cloze ({about['items']} items, {about['not_counted']['count']} answers "
                f"not one token, not counted): {self._cloze('cloze', about)}")
        return [f"{line}; {NULL_MEANS}" if NULL in line else line for line in lines]

    def _cloze(self, probe: str, about: dict) -> str:
        base = about["frequency_baseline"]
        one, ten = f"{probe}.p_at_1", f"{probe}.p_at_10"
        return (f"P@1 {self._with_interval(one)}, P@10 {self._with_interval(ten)} (word frequency "
                f"{self._beside(one, base['p_at_1'])}, {self._beside(ten, base['p_at_10'])})")

    def _pairs(self, probe: str, about: dict) -> str:
        """The headline accuracy with its interval, its baseline and, over some pairs, the
        share that differ in a word split into pieces and the other scoring's accuracy."""
        name = f"{probe}.accuracy"
        other = next(s for s in SCORINGS if s != self.details["scoring"])
        more = "" if not about["pairs"] else (
            f", {about['split_word']['share']:.0%} differing in a word split into pieces; "
            f"by {NAMES[other]} {self._with_interval(f'{probe}.accuracy_{other}')}")
        return (f"{self._with_interval(name)} (unigram "
                f"{self._beside(name, about['unigram_baseline']['accuracy'])}, "
                f"{about['pairs']} pairs{more})")

    def _with_interval(self, name: str) -> str:
        """The figure `name` (dotted, under `probe`) with its interval, to the precision the
        interval supports; without one (a report of no items), to four places."""
        if name in self.estimates:
            return self.estimates[name].text()
        value: Any = self.metrics
        for key in name.split("."):
            value = value[key]
        return _figure(value)

    def _beside(self, name: str, value: float | None) -> str:
        """A baseline beside the figure `name`, to that figure's precision."""
        if value is None or name not in self.estimates:
            return _figure(value)
        return f"{value:.{self.estimates[name].decimals}f}"


NULL = "null"
NULL_MEANS = "null: no item to score, not a score of 0"


def _figure(value: float | None) -> str:
    """A score to four places; None (no item to score) as the JSON holds it."""
    return NULL if value is None else f"{value:.4f}"


def probe_model(config: ProbeConfig, paths: ProbePaths, device: str,
                target: TrackingTarget | None) -> ProbeOutcome:
    """The probe stage: the model (`probe.model`, else the pretrained one) probed on `device`
    (auto, cpu, cuda, cuda:N), its items and report written, the report logged into the
    model's pretraining run (`probe_...` results, `probe.` tags; not when `target` is None)."""
    require_own_folder(paths.items_dir, ITEM_FILES)  # a user's folder: before any scoring
    model_dir, vocab_dir = (config.model, None) if config.model else (paths.model_dir,
                                                                       paths.vocab_dir)
    folder = Path(model_dir).expanduser()
    if config.model:
        require_own_tokenizer(folder, "probe.model")
    model, tokenizer = load_model_and_tokenizer(str(folder), vocab_dir, head="mlm")
    tracker, step = report_run(target, folder, paths.out_file, log)
    probing_device = resolve_device(device, setting="--device")
    lm = MaskedLM(model.to(probing_device), tokenizer, probing_device, config.batch_size)
    folder = tokenizer_folder(Path(model_dir), Path(vocab_dir) if vocab_dir else None)
    report = run_probes(lm, config, paths.val_file, paths.train_file, folder)
    details = {"model": str(model_dir), MODEL_KEY: weights_sha256(model_dir), **report.details}
    metrics, details, estimates = with_items(report.metrics, details, report.outcomes)
    write_items(paths.items_dir, report.items)
    files = write_report(paths.out_file, "probe", metrics, details, report.outcomes)
    log_report_into(tracker, step, files, metrics, "probe")
    return ProbeOutcome(metrics, details, estimates)
