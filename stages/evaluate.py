"""`bert evaluate`: held-out MLM and NSP metrics of the pretrained model, with fixed masks.
With BERT's second phase on (samples in `phase2/` of the samples folder), it scores the
model at both lengths: at the second under `length_<N>` in both files.

Writes `metrics/eval.json` (the scores: `dvc metrics`, `dvc exp show`) and, beside it,
`metrics/eval_details.json` (the baselines they are read against, and how much was scored),
and logs both into the MLflow run that trained the model (its id is in the model folder): the
scores as results at the model's last step (`eval_mlm_accuracy`, ...), the details as tags
(`eval.mlm_baseline_accuracy`, ...), both files as artifacts.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from bertcore.common.dotted import flatten
from bertcore.common.errors import BertError
from bertcore.common.tracking import TrackingConfig
from bertcore.data.samples.store import SampleStore, check_vocab, phase2_samples
from bertcore.training.batches import eval_batches
from bertcore.training.devices import resolve_device, resolve_precision
from bertcore.training.evaluation import EvalConfig, EvalMetrics, evaluate
from bertcore.training.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.training.nsp_baseline import bag_of_words_nsp
from bertcore.training.phases import scaled_masking
from stages.downstream import pretraining_run
from stages.options import (
    file_option,
    pretrained_option,
    samples_option,
    stage_options,
    stops_at_once,
    vocab_option,
)
from stages.params import load_params, read_params
from stages.repo import load_pretrained
from stages.report import track_report, write_report

log = logging.getLogger("bert.evaluate")


# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py)
PARAMS = {"masking": MaskingConfig, "eval": EvalConfig, "tracking": TrackingConfig}


@click.command()
@pretrained_option
@samples_option
@vocab_option
@file_option("--out", "out_file", "metrics/eval.json",
             "Where the scores go (dvc metrics); baselines and counts go beside it, in "
             "NAME_details.json.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:N.")
@stage_options
@stops_at_once
def command(model_dir, samples_dir, vocab_dir, out_file, device, params_file, overrides):
    """Score the model on the val split: MLM loss/accuracy/perplexity, NSP loss/accuracy."""
    sections = read_params(load_params(params_file, overrides), PARAMS)
    masking, config, tracking = sections["masking"], sections["eval"], sections["tracking"]
    samples_dir, model_dir = Path(samples_dir), Path(model_dir)
    base = check_vocab(samples_dir, vocab_dir).get("max_seq_length")
    val = SampleStore(samples_dir / "val")
    if not len(val):
        raise BertError(f"the val split in {samples_dir} is empty: raise corpus.val_fraction")
    longer = phase2_samples(samples_dir)  # BERT's second phase: its samples too
    length = check_vocab(longer, vocab_dir)["max_seq_length"] if longer else None
    model, tokens = load_pretrained(model_dir, vocab_dir)
    tracker, step, why_not = pretraining_run(tracking, model_dir)
    if why_not:  # say so rather than stay silent
        log.warning("nothing will be logged to MLflow: %s; the scores go to %s only", why_not,
                    out_file)

    target = resolve_device(device)
    model = model.to(target)
    vocab = VocabSpec.from_tokens(tokens)
    metrics, context = _score(model, val, samples_dir, masking, vocab, config.batch_size,
                              config.seed, target)
    scores = metrics.scores()
    if longer is not None:  # at phase 2's length too, with its MLM slots
        at_length, context[f"length_{length}"] = _score(
            model, SampleStore(longer / "val"), longer, scaled_masking(masking, base, length),
            vocab, config.batch_size, config.seed, target)
        scores[f"length_{length}"] = at_length.scores()
    files = write_report(out_file, scores, context)
    if tracker:
        results = {f"eval_{k}".replace(".", "_"): v for k, v in flatten(scores).items()}
        track_report(tracker, files, results, context, step=step, tag_prefix="eval.")
    words = context.get("nsp_bag_of_words_accuracy")
    click.echo(
        f"evaluate: MLM accuracy {metrics.mlm_accuracy:.4f} (most frequent token "
        f"{metrics.mlm_baseline_accuracy:.4f}), perplexity {metrics.perplexity:.2f}, NSP "
        f"accuracy {metrics.nsp_accuracy:.4f} (majority {metrics.nsp_baseline_accuracy:.4f}"
        + (f", bag of words {words:.4f}" if words is not None else "") + f") -> {out_file}",
        err=True,
    )
    if longer is not None:
        click.echo(f"evaluate (length {length}): MLM accuracy {at_length.mlm_accuracy:.4f}, "
                   f"NSP accuracy {at_length.nsp_accuracy:.4f}", err=True)


def _score(model, val: SampleStore, samples_dir: Path, masking: MaskingConfig, vocab: VocabSpec,
           batch_size: int, seed: int, device) -> tuple[EvalMetrics, dict]:
    """The val split `val` of `samples_dir`, with fixed masks: the metrics, and what they are
    read against (baselines, counts, the bag-of-words NSP on the words alone)."""
    collator = PretrainingCollator(masking, vocab, seed=seed)
    metrics = evaluate(model, eval_batches(val, collator, batch_size), device,
                       autocast_dtype=resolve_precision("auto", device))
    context = metrics.context()
    train = SampleStore(samples_dir / "train") if (samples_dir / "train").is_dir() else None
    if train is not None and len(train):  # words alone, no model
        context["nsp_bag_of_words_accuracy"] = bag_of_words_nsp(train, val)
    return metrics, context
