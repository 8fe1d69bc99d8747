"""`bert probe`: zero-shot probes of the pretrained model (or of any BERT folder in Hugging
Face format, `probe.model`): how well it knows which word fits a slot, without fine-tuning.

The built-in probes come from the held-out val split (cloze of held-out words; sentences
against the same with two adjacent words swapped, or a word replaced by one of close
frequency), read against what the train split's frequencies alone predict; `probe.minimal_pairs`
(BLiMP) and `probe.cloze` (LAMA) add the user's files. Writes `metrics/probe.json` (the
scores: `dvc exp show`), `metrics/probe_details.json` (baselines, counts, answers not counted)
and `metrics/probe/` (each item's scores), and logs the scores into the MLflow run that
trained the model, as `evaluate` does (`probe_<name>` results, `probe.` tags).
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from bertcore.common.dotted import flatten
from bertcore.common.report import track_report, write_report
from bertcore.common.tracking import TrackingConfig
from bertcore.downstream.probes.config import ProbeConfig
from bertcore.training.config import CpuConfig
from bertstages.infer import load_model_and_tokenizer
from bertstages.options import (
    corpus_option,
    file_option,
    folder_option,
    pretrained_option,
    stage_options,
    stops_at_once,
    vocab_option,
)
from bertstages.params import load_params, read_params
from bertstages.repo import tracking_target

log = logging.getLogger("bert.probe")

# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"probe": ProbeConfig, "cpu": CpuConfig, "tracking": TrackingConfig}


@click.command()
@pretrained_option
@vocab_option
@corpus_option
@file_option("--out", "out_file", "metrics/probe.json",
             "Where the scores go (dvc metrics); baselines and counts go beside it, in "
             "NAME_details.json.")
@folder_option("--items", "items_dir", "metrics/probe",
               "Where each probe's items go with their scores (JSON Lines).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:N.")
@stage_options
@stops_at_once
def command(model_dir, vocab_dir, corpus_dir, out_file, items_dir, device, params_file,
            overrides):
    """Zero-shot probes: cloze P@1/P@10 and minimal pairs by pseudo-log-likelihood."""
    sections = read_params(load_params(params_file, overrides), PARAMS)
    # torch, once the params are read (cli.py)
    from bertcore.downstream.probes.masked_lm import MaskedLM
    from bertcore.downstream.probes.probing import run_probes, write_items
    from bertcore.training.hardware.cpu import pin_cpu
    from bertcore.training.hardware.devices import resolve_device
    from bertcore.training.run.model_run import pretraining_run

    pin_cpu(sections["cpu"])  # before torch computes
    config, tracking = sections["probe"], sections["tracking"]
    if config.model:  # a BERT folder of its own, with its own tokenizer
        model_dir, vocab_dir = config.model, None
    model, tokenizer = load_model_and_tokenizer(model_dir, vocab_dir, head="mlm")
    tracker, step, why_not = pretraining_run(tracking_target(tracking), Path(model_dir))
    if why_not:
        log.warning("nothing will be logged to MLflow: %s; the scores go to %s only", why_not,
                    out_file)
    target = resolve_device(device)
    lm = MaskedLM(model.to(target), tokenizer, target, config.batch_size)
    corpus = Path(corpus_dir)
    report = run_probes(lm, config, corpus / "val.txt", corpus / "train.txt")
    details = {"model": str(model_dir), **report.details}
    write_items(items_dir, report.items)
    files = write_report(out_file, report.metrics, details)
    if tracker:
        results = {f"probe_{k}".replace(".", "_"): v for k, v in flatten(report.metrics).items()}
        track_report(tracker, files, results, details, step=step, tag_prefix="probe.")
    for line in summary(report.metrics, details):
        click.echo(line, err=True)
    click.echo(f"probe: -> {out_file}, {items_dir}/", err=True)


def summary(metrics: dict, details: dict) -> list[str]:
    """The console's lines: each probe's figure beside its baseline."""
    lines = []
    if "builtin" in metrics:
        scores, about = metrics["builtin"], details["builtin"]
        cloze, base = scores["cloze"], about["cloze"]["frequency_baseline"]
        lines.append(
            f"probe: held-out word cloze ({about['cloze']['items']} items): P@1 "
            f"{cloze['p_at_1']:.4f}, P@10 {cloze['p_at_10']:.4f} (word frequency "
            f"{base['p_at_1']:.4f}, {base['p_at_10']:.4f})")
        lines.append(
            "probe: held-out sentences by PLL, against two adjacent words swapped "
            f"{_pairs(scores, about, 'swapped_pairs')}; against a word of close frequency "
            f"{_pairs(scores, about, 'replaced_pairs')}")
    if "minimal_pairs" in metrics:
        lines.append(f"probe: minimal pairs {_pairs(metrics, details, 'minimal_pairs')}, "
                     f"{len(details['minimal_pairs']['groups'])} groups")
    if "cloze" in metrics:
        cloze, about = metrics["cloze"], details["cloze"]
        base = about["frequency_baseline"]
        lines.append(
            f"probe: cloze ({about['items']} items, {about['not_counted']['count']} answers "
            f"not one token, not counted): P@1 {cloze['p_at_1']:.4f}, P@10 "
            f"{cloze['p_at_10']:.4f} (word frequency {base['p_at_1']:.4f}, "
            f"{base['p_at_10']:.4f})")
    return lines


def _pairs(metrics: dict, details: dict, name: str) -> str:
    about = details[name]
    return (f"{metrics[name]['accuracy']:.4f} (unigram {about['unigram_baseline']['accuracy']:.4f},"
            f" {about['pairs']} pairs)")
