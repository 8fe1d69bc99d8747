"""All the probes of `probe:` over one model, into one report: the numbers runs are compared
on (metrics), what they are read against (details: baselines, counts, answers not counted)
and each item's scores (one JSON Lines file per probe, so that a user sees which fail)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bertcore.common.atomic import atomic_dir
from bertcore.common.errors import BertError
from bertcore.downstream.probes.builtin import REPLACED, SWAPPED, builtin_probes
from bertcore.downstream.probes.cloze import cloze_report, read_cloze, score_cloze
from bertcore.downstream.probes.config import ProbeConfig
from bertcore.downstream.probes.frequencies import count_train
from bertcore.downstream.probes.masked_lm import MaskedLM
from bertcore.downstream.probes.minimal_pairs import pair_report, read_minimal_pairs, score_pairs

BUILTIN_PAIRS = {SWAPPED: "swapped_pairs", REPLACED: "replaced_pairs"}


@dataclass
class ProbeReport:
    metrics: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    items: dict[str, list[dict]] = field(default_factory=dict)  # file name -> rows


def run_probes(lm: MaskedLM, config: ProbeConfig, val_file: str | Path,
               train_file: str | Path) -> ProbeReport:
    """The built-in probes (unless `builtin_sentences` is 0) and the user's files, if any."""
    if not config.builtin_sentences and not (config.minimal_pairs or config.cloze):
        raise BertError("probe.builtin_sentences is 0 and neither probe.minimal_pairs nor "
                        "probe.cloze is set: there is nothing to probe")
    # read the user's files first: a mistake in them stops before anything is scored
    pairs = read_minimal_pairs(config.minimal_pairs) if config.minimal_pairs else None
    cloze = read_cloze(config.cloze) if config.cloze else None
    counts = count_train(train_file, lm)
    report = ProbeReport()
    if config.builtin_sentences:
        _builtin(report, lm, config, val_file, counts)
    if pairs is not None:
        scored = score_pairs(lm, pairs, counts)
        report.metrics["minimal_pairs"], details = pair_report(scored)
        report.details["minimal_pairs"] = {"from": config.minimal_pairs, **details}
        report.items["minimal_pairs.jsonl"] = [s.row() for s in scored]
    if cloze is not None:
        scored = score_cloze(lm, cloze)
        report.metrics["cloze"], details = cloze_report(scored, counts, lm)
        report.details["cloze"] = {"from": config.cloze, **details}
        report.items["cloze.jsonl"] = [s.row(lm) for s in scored]
    report.details["frequencies"] = counts.describe(str(train_file))
    return report


def _builtin(report: ProbeReport, lm: MaskedLM, config: ProbeConfig, val_file: str | Path,
             counts) -> None:
    probes = builtin_probes(val_file, lm, counts, config.builtin_sentences, config.seed)
    scored_cloze = score_cloze(lm, probes.cloze, "built-in cloze")
    metrics, details = cloze_report(scored_cloze, counts, lm)
    del details["groups"]  # one group
    built = {"cloze": metrics}
    about = {**probes.describe(str(val_file)), "seed": config.seed, "cloze": details}
    scored_pairs = score_pairs(lm, probes.pairs, counts, "built-in pairs")
    for group, name in BUILTIN_PAIRS.items():
        built[name], details = pair_report([s for s in scored_pairs if s.pair.group == group])
        del details["groups"]
        about[name] = details
    report.metrics["builtin"], report.details["builtin"] = built, about
    report.items["builtin_cloze.jsonl"] = [s.row(lm) for s in scored_cloze]
    report.items["builtin_pairs.jsonl"] = [s.row() for s in scored_pairs]


def write_items(folder: str | Path, items: dict[str, list[dict]]) -> None:
    """The folder of per-item files, written whole (only this run's files in it)."""
    with atomic_dir(folder) as staging:
        for name, rows in items.items():
            with (Path(staging) / name).open("w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
