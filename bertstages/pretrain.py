"""`bert pretrain`: MLM + NSP pretraining on the samples, resumable, tracked in MLflow.

Reads the sections model, masking, train, phase2 (BERT's second phase: more steps on longer
samples, from phase 1's end), eval (batch size and seed of the periodic evaluation, and the
built-in probes scored beside it, drawn from `--corpus`'s val split) and tracking, and hands
them to `bertcore.training.run.pretrain`, after pinning the CPU kernels and threads of `cpu`
(`bertcore.common.cpu`); `model.init_from` starts
from an existing BERT instead of random weights (continued pretraining). Resumes from the
latest checkpoint in `--checkpoints` when it was made with the same params, vocabulary,
samples and initial model (a changed `train.max_steps`, `train.epochs` or `train.max_minutes`
extends the run); otherwise starts fresh and says why, setting aside the checkpoints it
replaces in `--checkpoints`/replaced (`train.keep_replaced`). `train.max_minutes` ends the run
early when its steps would not fit in the time (see `bertcore.training.loop.budget`). With
more than one process (`train.nproc_per_node`; auto: one per core, or GPU, as many as split
`train.micro_batches` evenly) it relaunches itself under torchrun; started by torchrun, it
joins the process group. The weights have the same bytes for any number of processes
(`bertcore.training.hardware.fixed_sum`). A side run, `--out` elsewhere than
models/pretrained, names its own `--metrics`, `--log` and `--eval-log` (those left at their
defaults report on models/pretrained, and the export's card reads them).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bertcore.common.config import CpuConfig
from bertcore.common.errors import BertError
from bertcore.common.interrupt import signal_when_parent_dies
from bertcore.common.report import details_file
from bertcore.common.tracking import TrackingConfig
from bertcore.data.corpus.splits import split_file
from bertcore.model.config import ModelConfig
from bertcore.training.config import (
    EvalConfig,
    MaskingConfig,
    Phase2Config,
    PretrainConfig,
    TrainConfig,
)
from bertstages.apart import keep_outputs_apart
from bertstages.dvcdeps import warn_unless_a_dep
from bertstages.options import (
    corpus_option,
    file_option,
    folder_option,
    params_options,
    samples_option,
    vocab_option,
)
from bertstages.params import load_params, read_params
from bertstages.repo import tracking_target

if TYPE_CHECKING:
    from bertcore.downstream.probes.during_pretraining import ProbeDraw

log = logging.getLogger("bert.pretrain")


# ---------------------------------------------------------------------------------- command
# The reports of the stages that log into the pretraining run (evaluate's and probe's --out):
# a new run that wrote the weights they scored logs them too (bertcore.saved.run_reports)
REPORTS = {"eval": "metrics/eval.json", "probe": "metrics/probe.json"}
# What the stage reads of params.yaml (dvc.yaml lists the same: tests/test_stage_params.py),
# by the names of PretrainConfig's fields, and cpu, which the stage pins before it computes
PARAMS = {"model": ModelConfig, "masking": MaskingConfig, "train": TrainConfig,
          "eval": EvalConfig, "tracking": TrackingConfig, "phase2": Phase2Config,
          "cpu": CpuConfig}


@click.command()
@samples_option
@vocab_option
@corpus_option
@folder_option("--checkpoints", "checkpoint_dir", "models/checkpoints",
               "Checkpoints: resumed from when the params match.")
@folder_option("--out", "out_dir", "models/pretrained", "Where the final model goes.")
@file_option("--metrics", "metrics_file", "metrics/pretrain.json",
             "Steps and final train metrics (dvc metrics); counts go beside it, in "
             "NAME_details.json.")
@file_option("--log", "log_file", "metrics/pretrain_log.tsv",
             "One row per logging step (dvc plots).")
@file_option("--eval-log", "eval_log_file", "metrics/pretrain_eval.tsv",
             "One row per periodic evaluation (dvc plots).")
@params_options
def command(samples_dir, vocab_dir, corpus_dir, checkpoint_dir, out_dir, metrics_file, log_file,
            eval_log_file, params_file, overrides) -> None:
    """Pretrain BERT (MLM + NSP) on the samples; resumes from the latest matching checkpoint."""
    params = load_params(params_file, overrides, PARAMS)
    sections = read_params(params, PARAMS)
    cpu = sections["cpu"]
    config = PretrainConfig(**{name: section for name, section in sections.items()
                               if name != "cpu"})
    keep_outputs_apart({"model.init_from": config.model.init_from}, warn_deps=False)  # below
    keep_the_pipeline_reports(out_dir)
    if "WORLD_SIZE" not in os.environ:  # said once, not by each process of torchrun's
        say_unused_local_counts(config.model, load_params(params_file, overrides, reads=()))
    # torch, once the params are read (cli.py)
    from bertcore.common.cpu import pin_cpu, refuse_compile_on_pinned_cpu
    from bertcore.training.run.inputs import PretrainPaths
    from bertcore.training.run.pretrain import run_pretraining

    refuse_compile_on_pinned_cpu(config.train.compile, config.train.device, cpu)
    pin_cpu(cpu)  # before torch computes; torchrun's processes inherit it
    if config.model.init_from and "WORLD_SIZE" not in os.environ:
        warn_unless_a_dep("model.init_from", config.model.init_from)
    if "WORLD_SIZE" not in os.environ:
        nproc = processes(config)
        if nproc > 1:
            _relaunch_under_torchrun(nproc, config.train.max_restarts)
            return
    else:  # started by torchrun (this stage's relaunch, or the user's own)
        config.require_processes(int(os.environ["WORLD_SIZE"]))
    paths = PretrainPaths(samples=Path(samples_dir), vocab=Path(vocab_dir),
                          checkpoints=Path(checkpoint_dir), out=Path(out_dir),
                          metrics=Path(metrics_file), details=details_file(metrics_file),
                          log=Path(log_file),
                          eval_log=Path(eval_log_file),
                          reports={group: Path(path) for group, path in REPORTS.items()},
                          corpus=Path(corpus_dir))
    # the run records params.yaml whole: the sections it read as they resolved, the others
    # as written (cpu is not pretraining's config: as it resolved)
    target = tracking_target(config.tracking, "pretrain",
                             {**params, "cpu": dataclasses.asdict(cpu)})
    probes = probe_draw(config.eval, Path(vocab_dir), Path(corpus_dir), Path(samples_dir))
    report = run_pretraining(config, paths, target, probes)
    if report is None:
        return  # not rank 0
    val, loss = report.val, report.metrics["train"].get("loss", float("nan"))
    click.echo(
        f"pretrain: {report.metrics['steps']} steps, train loss {loss:.4f}"
        + (f", val (length {report.val_length}): MLM accuracy {val['mlm_accuracy']:.3f} "
           f"(baseline {val['mlm_baseline_accuracy']:.3f}), NSP accuracy "
           f"{val['nsp_accuracy']:.3f}" if val else "")
        + f" -> {out_dir}",
        err=True,
    )
    if "plateau" in report.details:
        click.echo(f"pretrain: warning: {report.details['plateau']}", err=True)


def say_unused_local_counts(model: ModelConfig, written: dict) -> None:
    """`model.local_attention_heads` and `local_attention_layers` change nothing with the
    local init off (or `init_from`), yet the run records them: one warning for those the user
    wrote (`written`: params.yaml with --set, no recipe), to leave them out; one note for those
    only the recipe gave, under a local init the user turned off."""
    unused = model.unused_local_counts()
    if not unused:
        return
    why = ("with model.init_from (the weights are the folder's)" if model.init_from else
           "with model.local_attention_init: false (every head starts with BERT's init)")
    mine = written.get("model") if isinstance(written.get("model"), dict) else {}
    yours = [name for name in unused if name in mine]
    named = " and ".join(f"model.{name} ({getattr(model, name)})" for name in yours or unused)
    if yours:
        log.warning("%s change%s nothing %s: leave %s out", named,
                    "" if len(yours) > 1 else "s", why, "them" if len(yours) > 1 else "it")
    else:
        log.info("the recipe's %s change%s nothing %s", named,
                 "" if len(unused) > 1 else "s", why)


# The files that report on the model --out holds (the export's card reads pretrain.json)
REPORT_OPTIONS = {"metrics_file": "--metrics", "log_file": "--log",
                  "eval_log_file": "--eval-log"}


def keep_the_pipeline_reports(out_dir: str) -> None:
    """A side run, `--out` elsewhere than the pipeline's model, must not rewrite the reports
    of the pipeline's model unless pointed at them: refused in one line while any of
    `REPORT_OPTIONS` is left unset (at its default)."""
    context = click.get_current_context()
    defaults = {param.name: param.default for param in context.command.params}
    if _same_path(out_dir, defaults["out_dir"]):
        return
    left = [flag for name, flag in REPORT_OPTIONS.items()
            if context.get_parameter_source(name) is click.core.ParameterSource.DEFAULT]
    if left:
        raise BertError(
            f"--out {out_dir} is not {defaults['out_dir']}, but {', '.join(left)} "
            f"{'is' if len(left) == 1 else 'are'} left at the reports of "
            f"{defaults['out_dir']} (metrics/pretrain*): give this run's reports paths of "
            f"their own ({' '.join(f'{flag} PATH' for flag in left)})")


def _same_path(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def probe_draw(settings: EvalConfig, vocab_dir: Path, corpus_dir: Path,
               samples_dir: Path) -> ProbeDraw | None:
    """The built-in probes scored at each periodic evaluation (`eval.probe_sentences` of the
    corpus's val split), or None: off, no val split to draw from, or the val split of another
    corpus than the samples' (each said in one line)."""
    if not settings.probe_sentences:
        return None
    val, train = split_file(corpus_dir, "val"), split_file(corpus_dir, "train")
    if not (val.is_file() and train.is_file()):
        log.warning("no probes while pretraining: %s has no train.txt and val.txt (pass "
                    "--corpus, or set eval.probe_sentences: 0)", corpus_dir)
        return None
    from bertcore.data.samples.origin import other_corpus

    if (other := other_corpus(samples_dir, val, "val")) is not None:
        log.warning("no probes while pretraining: %s: another corpus than the samples' (pass "
                    "the --corpus they were made from, or set eval.probe_sentences: 0)", other)
        return None
    from bertcore.data.vocab.existing import read_tokenizer
    from bertcore.downstream.probes.during_pretraining import ProbeDraw
    from bertcore.model.tokenizer import BERT_DEFAULT_RULES

    tokenizer = read_tokenizer(vocab_dir, BERT_DEFAULT_RULES, "BertTokenizer's defaults",
                               f"--vocab {vocab_dir}").tokenizer
    return ProbeDraw(tokenizer, val, train, settings.probe_sentences, settings.seed)


def processes(config: PretrainConfig) -> int:
    """How many processes `train.nproc_per_node` runs: its number, checked against the
    micro-batches (BertError in one line), or with auto one per core (per GPU on CUDA), as
    many as split the micro-batches evenly (said in a line)."""
    if config.train.nproc_per_node != "auto":
        config.require_processes(config.train.nproc_per_node)
        return config.train.nproc_per_node
    import torch

    device = config.train.device
    on_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    devices = torch.cuda.device_count() if device in ("auto", "cuda") and on_cuda else (
        1 if on_cuda else _cores())
    count = config.processes_for(devices)
    log.info("train.nproc_per_node auto: %d process%s on %d %s", count,
             "" if count == 1 else "es", devices, "GPUs" if on_cuda else "cores")
    return count


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def torchrun_command(nproc: int, max_restarts: int, stage_args: list[str],
                     log_dir: str) -> list[str]:
    """The torchrun command line that runs `bert STAGE_ARGS` in `nproc` processes, torchrun's
    own files in `log_dir`. The stage's arguments come after `--`, so torchrun never reads
    them as its own (`--log` would be an ambiguous abbreviation of its `--log-dir`)."""
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
            f"--max-restarts={max_restarts}", f"--log-dir={log_dir}", "--standalone", "-m",
            "--", "bertstages", *stage_args]


def _relaunch_under_torchrun(nproc: int, max_restarts: int) -> None:
    """Run this very command under torchrun with `nproc` processes on this machine; after a
    worker failure torchrun restarts them all (`max_restarts` times), and they resume from
    the latest checkpoint."""
    # torchrun's files (one folder a run) in a folder removed after it: left to torchrun, a
    # torchelastic_* folder stays in the temp folder for every run
    with tempfile.TemporaryDirectory(prefix="bert-torchrun-") as log_dir:
        args = torchrun_command(nproc, max_restarts, sys.argv[1:], log_dir)
        log.info("launching %d processes: %s", nproc, " ".join(args[1:]))
        # torchrun ends with this process (SIGTERM: it stops its workers, which checkpoint)
        code = subprocess.call(args, preexec_fn=partial(signal_when_parent_dies, signal.SIGTERM))
    if code != 0:
        raise BertError(f"torchrun with {nproc} processes failed (exit code {code}); "
                        "see the messages above")
