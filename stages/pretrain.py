"""`bert pretrain`: MLM + NSP pretraining on the samples, resumable, tracked in MLflow.

Reads the sections model, masking, train, eval (batch size and seed of the periodic
evaluation) and tracking. Resumes from the latest checkpoint in `--checkpoints` when it was
made with the same params, vocabulary and samples; otherwise starts fresh and says why.
With `train.nproc_per_node > 1` it relaunches itself under torchrun (one process per
device); started by torchrun, it joins the process group.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import torch

from bertcore.atomic import atomic_dir, write_json
from bertcore.batches import PretrainingBatches, eval_batches
from bertcore.checkpoint import (
    Checkpoint,
    CheckpointDir,
    changed_fingerprints,
    fingerprint_files,
    fingerprint_params,
)
from bertcore.distributed import Distributed
from bertcore.errors import BertError
from bertcore.evaluation import EvalConfig, evaluate
from bertcore.hf import export_hf, load_model, save_model
from bertcore.masking import MaskingConfig, PretrainingCollator, VocabSpec
from bertcore.model import BertConfig, BertForPretraining, ModelParams
from bertcore.samples import SampleStore, check_vocab, read_meta
from bertcore.tracking import Tracker, TrackingConfig, git_commit, resolve_uri, sqlite_uri
from bertcore.train import (
    TrainConfig,
    Trainer,
    TrainingInterrupted,
    TrainingRecord,
    fit,
    resolve_device,
)
from bertcore.vocab import read_vocab, vocab_fingerprint
from stages.options import (
    file_option,
    folder_option,
    samples_option,
    stage_options,
    vocab_option,
)
from stages.params import flatten, load_params, parse_section

log = logging.getLogger("bert.pretrain")

RUN_INFO = "training.json"  # in the model folder: which MLflow run and step made it
SAMPLE_ARRAYS = ("input_ids", "offsets", "segment_b_start", "is_random_next")


# ------------------------------------------------------------------------ where things live
def repo_root(start: str | os.PathLike | None = None) -> Path:
    """The repository the pipeline runs in. `dvc exp run --temp/--queue` runs stages in a
    copy under `<repo>/.dvc/tmp/exps/...`: the real repo is the one above that copy (what is
    written inside the copy is thrown away)."""
    here = Path(start or os.environ.get("DVC_ROOT") or Path.cwd()).resolve()
    parts = here.parts
    for i in range(len(parts) - 2):
        if parts[i : i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    for candidate in (here, *here.parents):
        if (candidate / ".dvc").is_dir() or (candidate / ".git").exists():
            return candidate
    return here


def tracking_uri(config: TrackingConfig) -> str:
    """tracking.uri, else $MLFLOW_TRACKING_URI, else mlflow.db at the repo root."""
    return resolve_uri(config.uri, sqlite_uri(repo_root() / "mlflow.db"))


def load_pretrained(model_dir: str | Path, vocab_dir: str | Path):
    """The model `bert pretrain` wrote and the vocabulary it must have been trained with."""
    model = load_model(model_dir)
    tokens = read_vocab(vocab_dir)
    if model.config.vocab_size != len(tokens):
        raise BertError(f"the model in {model_dir} has {model.config.vocab_size} tokens, the "
                        f"vocabulary in {vocab_dir} {len(tokens)}: rerun `bert pretrain`")
    return model, tokens


def samples_fingerprint(samples_dir: Path) -> str:
    files = [samples_dir / "meta.json"]
    files += [samples_dir / "train" / f"{name}.npy" for name in SAMPLE_ARRAYS]
    return fingerprint_files(files)


# ---------------------------------------------------------------------------------- command
@click.command()
@samples_option
@vocab_option
@folder_option("--checkpoints", "checkpoint_dir", "models/checkpoints",
               "Checkpoints: resumed from when the params match.")
@folder_option("--out", "out_dir", "models/pretrained", "Where the final model goes.")
@file_option("--metrics", "metrics_file", "metrics/pretrain.json",
             "Final train/val metrics (dvc metrics).")
@file_option("--log", "log_file", "metrics/pretrain_log.tsv",
             "One row per logging step (dvc plots).")
@file_option("--eval-log", "eval_log_file", "metrics/pretrain_eval.tsv",
             "One row per periodic evaluation (dvc plots).")
@stage_options
def command(samples_dir, vocab_dir, checkpoint_dir, out_dir, metrics_file, log_file,
            eval_log_file, params_file, overrides) -> None:
    """Pretrain BERT (MLM + NSP) on the samples; resumes from the latest matching checkpoint."""
    params = load_params(params_file, overrides)
    train_config = parse_section(params, "train", TrainConfig)
    if train_config.nproc_per_node > 1 and "WORLD_SIZE" not in os.environ:
        _relaunch_under_torchrun(train_config.nproc_per_node, train_config.max_restarts)
        return
    paths = PretrainPaths(
        samples=Path(samples_dir),
        vocab=Path(vocab_dir),
        checkpoints=Path(checkpoint_dir),
        out=Path(out_dir),
        metrics=Path(metrics_file),
        log=Path(log_file),
        eval_log=Path(eval_log_file),
    )
    run_pretraining(params, paths)


def _relaunch_under_torchrun(nproc: int, max_restarts: int) -> None:
    """Run this very command under torchrun with `nproc` processes on this machine; after a
    worker failure torchrun restarts them all (`max_restarts` times), and they resume from
    the latest checkpoint."""
    args = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
            f"--max-restarts={max_restarts}", "--standalone", "-m", "stages", *sys.argv[1:]]
    log.info("launching %d processes: %s", nproc, " ".join(args[1:]))
    code = subprocess.call(args)
    if code != 0:
        raise BertError(f"torchrun with {nproc} processes failed (exit code {code}); "
                        "see the messages above")


@dataclass(frozen=True)
class PretrainPaths:
    """What the stage reads (samples, vocab, checkpoints) and writes."""

    samples: Path
    vocab: Path
    checkpoints: Path
    out: Path
    metrics: Path
    log: Path
    eval_log: Path


@dataclass(frozen=True)
class PretrainInputs:
    """The parsed params sections and the opened inputs, all checked before training."""

    model_params: ModelParams
    masking: MaskingConfig
    train: TrainConfig
    eval: EvalConfig
    tracking: TrackingConfig
    train_store: SampleStore
    val_store: SampleStore
    tokens: list[str]
    model_config: BertConfig

    @classmethod
    def read(cls, params: dict[str, Any], paths: PretrainPaths) -> PretrainInputs:
        model_params = parse_section(params, "model", ModelParams)
        masking = parse_section(params, "masking", MaskingConfig)
        train = parse_section(params, "train", TrainConfig)
        eval_config = parse_section(params, "eval", EvalConfig)
        tracking = parse_section(params, "tracking", TrackingConfig)
        meta = read_meta(paths.samples)
        check_vocab(paths.samples, paths.vocab)
        tokens = read_vocab(paths.vocab)
        model_config = model_params.to_config(vocab_size=len(tokens))
        if meta.get("max_seq_length", 0) > model_config.max_position_embeddings:
            raise BertError(
                f"samples are up to {meta['max_seq_length']} tokens but the model has "
                f"max_position_embeddings={model_config.max_position_embeddings}: raise "
                "model.max_position_embeddings or lower samples.max_seq_length"
            )
        return cls(model_params, masking, train, eval_config, tracking,
                   SampleStore(paths.samples / "train"), SampleStore(paths.samples / "val"),
                   tokens, model_config)


def run_pretraining(params: dict[str, Any], paths: PretrainPaths) -> dict[str, Any]:
    """The whole stage; returns what it wrote to the metrics file (rank 0)."""
    inputs = PretrainInputs.read(params, paths)  # checked before anything slow
    device_name = inputs.train.device
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    dist = Distributed.from_env(torch.device(device_name).type)
    try:
        # One run at a time in a checkpoint folder (rank 0 holds the lock for its run).
        with CheckpointDir(paths.checkpoints).lock(enabled=dist.is_main):
            return _train(params, paths, inputs, dist)
    finally:
        dist.close()


def _train(params: dict[str, Any], paths: PretrainPaths, inputs: PretrainInputs,
           dist: Distributed) -> dict[str, Any]:
    config, masking, model_params = inputs.train, inputs.masking, inputs.model_params
    eval_config, tracking = inputs.eval, inputs.tracking
    train_store, val_store, tokens = inputs.train_store, inputs.val_store, inputs.tokens
    samples_dir, vocab_dir, checkpoint_dir = paths.samples, paths.vocab, paths.checkpoints
    device = resolve_device(config.device, dist)
    optimisation = {
        "model": dataclasses.asdict(model_params),
        "masking": dataclasses.asdict(masking),
        "train": config.optimisation_params(),
    }
    fingerprints = {
        "params": fingerprint_params(optimisation),
        "vocab": vocab_fingerprint(vocab_dir),
        "samples": samples_fingerprint(samples_dir),
    }

    # Resume or start fresh.
    checkpoints = CheckpointDir(checkpoint_dir, keep_last=config.keep_last)
    latest = checkpoints.latest()
    resume: Checkpoint | None = None
    if latest is not None:
        changed = changed_fingerprints(latest.fingerprints, fingerprints)
        if changed:
            if dist.is_main:
                log.warning("checkpoint %s was made with other %s%s: starting fresh (it will "
                            "be replaced)", latest.path, " and ".join(changed),
                            _param_changes(latest.meta.get("params"), optimisation))
        else:
            resume = latest

    # MLflow before any training: an unreachable store fails now, in one line.
    tracker = None
    if dist.is_main and tracking.enabled:
        root = repo_root()
        tracker = Tracker.start(
            tracking_uri(tracking),
            tracking.experiment,
            run_id=resume.meta.get("mlflow_run_id") if resume else None,
            run_name=os.environ.get("DVC_EXP_NAME") or None,
            params=flatten(params),
            tags={
                "mlflow.source.git.commit": git_commit(root),
                "DVC_EXP_NAME": os.environ.get("DVC_EXP_NAME"),
                "DVC_STAGE": os.environ.get("DVC_STAGE"),
                **{f"fingerprint.{k}": v for k, v in fingerprints.items()},
            },
        )
    run_id = dist.broadcast_object(tracker.run_id if tracker else None)

    # The model: the same initial weights on every process (DDP also broadcasts rank 0's),
    # then a different dropout stream per process.
    torch.manual_seed(config.seed)
    model = BertForPretraining(inputs.model_config)
    torch.manual_seed(config.seed + 1 + dist.rank)
    vocab = VocabSpec.from_tokens(tokens)
    batches = PretrainingBatches(
        train_store,
        PretrainingCollator(masking, vocab, seed=config.seed),
        config.batch_size,
        config.gradient_accumulation_steps,
        seed=config.seed,
        rank=dist.rank,
        world_size=dist.world_size,
        num_workers=config.num_workers,
        pin_memory=device.type == "cuda",
    )
    trainer = Trainer(model, config, batches, device=device, dist=dist)
    if resume is not None:
        trainer.resume_from(resume)
        if dist.is_main:
            log.info("resuming from %s (step %d of %d)", resume.path, trainer.step,
                     trainer.total_steps)

    evaluate_fn = None
    if len(val_store):
        val = eval_batches(val_store, PretrainingCollator(masking, vocab, seed=eval_config.seed),
                           eval_config.batch_size, rank=dist.rank, world_size=dist.world_size)

        def evaluate_fn(m):
            return evaluate(m, val, device, trainer.autocast_dtype, dist, eval_config.max_batches)

    record = TrainingRecord(
        paths.log if dist.is_main else None,
        paths.eval_log if dist.is_main else None,
        tracker,
        previous={name: resume.read_text(name) for name in ("train_log.tsv", "eval_log.tsv")}
        if resume
        else None,
    )
    checkpoint_meta = {
        "fingerprints": fingerprints,
        "params": optimisation,
        "mlflow_run_id": run_id,
        "world_size": dist.world_size,
    }
    on_checkpoint = None
    if tracker and tracking.log_checkpoints == "all":

        def on_checkpoint(path: Path) -> None:
            tracker.log_artifacts(path, f"checkpoints/{path.name}")

    try:
        result = fit(trainer, record=record, checkpoints=checkpoints, meta=checkpoint_meta,
                     evaluate=evaluate_fn, on_checkpoint=on_checkpoint)
    except BaseException as exc:
        if tracker:
            interrupted = isinstance(exc, KeyboardInterrupt | TrainingInterrupted)
            tracker.finish("KILLED" if interrupted else "FAILED")
        raise
    if not dist.is_main:
        return {}

    with atomic_dir(paths.out) as staging:
        save_model(trainer.raw_model, staging)
        write_json(staging / RUN_INFO, {"mlflow_run_id": run_id, "step": trainer.step,
                                        "fingerprints": fingerprints})
    summary = {
        "steps": result.steps,
        "tokens_seen": result.tokens_seen,
        "skipped_steps": result.skipped_steps,
        "parameters": trainer.raw_model.num_parameters(),
        "train": {k: v for k, v in result.last_train.items() if k not in ("step", "epoch")},
        "val": result.last_eval.to_dict() if result.last_eval else {},
    }
    write_json(paths.metrics, summary)
    if tracker:
        final = checkpoints.latest()
        if tracking.log_checkpoints == "last" and final is not None:
            tracker.log_artifacts(final.path, f"checkpoints/{final.path.name}")
        with tempfile.TemporaryDirectory() as tmp:
            export_hf(trainer.raw_model.cpu(), tmp, vocab_dir)
            tracker.log_artifacts(tmp, "hf_model")
        tracker.finish()
    val, loss = summary["val"], summary["train"].get("loss", float("nan"))
    click.echo(
        f"pretrain: {result.steps} steps, train loss {loss:.4f}"
        + (f", val MLM accuracy {val['mlm_accuracy']:.3f} (baseline "
           f"{val['mlm_baseline_accuracy']:.3f}), NSP accuracy {val['nsp_accuracy']:.3f}"
           if val else "")
        + f" -> {paths.out}",
        err=True,
    )
    return summary


def _param_changes(saved: dict | None, current: dict) -> str:
    """` (train.learning_rate 0.001 -> 0.002, ...)` for the log message."""
    if not saved:
        return ""
    before, after = flatten(saved), flatten(current)
    keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if not keys:
        return ""
    shown = ", ".join(f"{k} {before.get(k)!r} -> {after.get(k)!r}" for k in keys[:5])
    return f" ({shown}{', ...' if len(keys) > 5 else ''})"
