"""The pretraining loop: AdamW, linear warmup then decay, accumulation, AMP, clipping,
periodic evaluation, atomic checkpoints and exact resume, on one process or many (DDP).

One optimizer step consumes one global batch of `batch_size` sequences, cut into
`gradient_accumulation_steps` micro-batches on each of the `world_size` processes. Both losses
are divided by their counts over the WHOLE step (all micro-batches, all processes), so
accumulation and DDP compute the gradient of one big batch. The data position is the step
number itself (see `bertcore.batches`), so a checkpoint plus the RNG states is all that
resuming needs: the resumed run draws the same batches, masks and dropout as an
uninterrupted one.

A step whose loss or gradient is not finite is skipped (weights and optimizer untouched) and
counted; `max_nonfinite_steps` of them in a row stop the run with a clear error, and no
checkpoint is written from then on, so the last good one stays the latest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from bertcore.batches import PretrainingBatches
from bertcore.checkpoint import CheckpointDir, capture_rng_state, restore_rng_state
from bertcore.distributed import Distributed
from bertcore.errors import BertError, require
from bertcore.evaluation import EvalMetrics
from bertcore.model import IGNORE_INDEX, BertForPretraining, pretraining_loss

log = logging.getLogger(__name__)

Precision = Literal["auto", "fp32", "bf16", "fp16"]

# Keys of TrainConfig that do not change the optimisation: a checkpoint made with other values
# of these is still resumed (they are left out of the params fingerprint).
BOOKKEEPING_KEYS = frozenset(
    {
        "device",
        "log_every",
        "eval_every",
        "checkpoint_every",
        "keep_last",
        "max_nonfinite_steps",
        "num_workers",
        "nproc_per_node",
        "max_restarts",
    }
)


@dataclass
class TrainConfig:
    """The `train:` section of params.yaml."""

    max_steps: int | None = 1000  # optimizer steps; null: `epochs` passes over the samples
    epochs: float | None = None
    batch_size: int = 32  # sequences per optimizer step, over all micro-batches and processes
    gradient_accumulation_steps: int = 1
    learning_rate: float = 5e-4
    warmup_steps: int = 100
    weight_decay: float = 0.01  # not on biases and LayerNorm
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    adam_epsilon: float = 1e-6
    max_grad_norm: float = 1.0
    mlm_weight: float = 1.0
    nsp_weight: float = 1.0
    precision: Precision = "auto"  # auto: bf16 on CUDA, fp32 on CPU
    device: str = "auto"  # auto: cuda if available, else cpu
    log_every: int = 10
    eval_every: int = 250  # 0: only at the end
    checkpoint_every: int = 250  # 0: only at the end (and on interruption)
    keep_last: int = 2
    max_nonfinite_steps: int = 10  # this many non-finite steps in a row stop the run
    num_workers: int = 0  # DataLoader workers per process
    compile: bool = False  # torch.compile the model
    nproc_per_node: int = 1  # >1: the pretrain stage relaunches itself under torchrun
    max_restarts: int = 0  # torchrun restarts after a worker failure (each resumes)
    seed: int = 42

    def __post_init__(self):
        require(
            (self.max_steps is None) != (self.epochs is None),
            "max_steps",
            self.max_steps,
            "a number of steps, or null with train.epochs set (exactly one of the two)",
        )
        if self.max_steps is not None:
            require(self.max_steps >= 1, "max_steps", self.max_steps, "an integer >= 1")
        if self.epochs is not None:
            require(self.epochs > 0, "epochs", self.epochs, "a number > 0")
        require(self.batch_size >= 1, "batch_size", self.batch_size, "an integer >= 1")
        acc = self.gradient_accumulation_steps
        require(acc >= 1, "gradient_accumulation_steps", acc, "an integer >= 1")
        require(
            self.batch_size % acc == 0,
            "batch_size",
            self.batch_size,
            f"a multiple of gradient_accumulation_steps ({acc})",
        )
        require(self.learning_rate > 0, "learning_rate", self.learning_rate, "a number > 0")
        require(self.warmup_steps >= 0, "warmup_steps", self.warmup_steps, "an integer >= 0")
        require(self.weight_decay >= 0, "weight_decay", self.weight_decay, "a number >= 0")
        betas = self.adam_betas
        require(
            len(betas) == 2 and all(0 <= b < 1 for b in betas),
            "adam_betas",
            betas,
            "two numbers in [0, 1)",
        )
        require(self.adam_epsilon > 0, "adam_epsilon", self.adam_epsilon, "a number > 0")
        require(self.max_grad_norm > 0, "max_grad_norm", self.max_grad_norm, "a number > 0")
        require(self.mlm_weight >= 0, "mlm_weight", self.mlm_weight, "a number >= 0")
        require(self.nsp_weight >= 0, "nsp_weight", self.nsp_weight, "a number >= 0")
        require(
            self.device == "auto" or self.device.split(":")[0] in ("cpu", "cuda", "mps"),
            "device",
            self.device,
            "auto, cpu, cuda, cuda:N or mps",
        )
        require(self.log_every >= 1, "log_every", self.log_every, "an integer >= 1")
        require(self.eval_every >= 0, "eval_every", self.eval_every, "an integer >= 0")
        require(
            self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every, "an int >= 0"
        )
        require(self.keep_last >= 1, "keep_last", self.keep_last, "an integer >= 1")
        k = self.max_nonfinite_steps
        require(k >= 1, "max_nonfinite_steps", k, "an integer >= 1")
        require(self.num_workers >= 0, "num_workers", self.num_workers, "an integer >= 0")
        require(self.nproc_per_node >= 1, "nproc_per_node", self.nproc_per_node, "an int >= 1")
        require(self.max_restarts >= 0, "max_restarts", self.max_restarts, "an integer >= 0")

    def total_steps(self, steps_per_epoch: int) -> int:
        if self.max_steps is not None:
            return self.max_steps
        return max(1, math.ceil(self.epochs * steps_per_epoch))

    def optimisation_params(self) -> dict[str, Any]:
        """The values that define the optimisation (fingerprinted for resuming)."""
        values = dataclasses.asdict(self)
        return {k: v for k, v in values.items() if k not in BOOKKEEPING_KEYS}


# ------------------------------------------------------------------------- building blocks
def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """LR multiplier at `step` (0-based): 0 → 1 over the warmup, then 1 → 0 at `total_steps`
    (the schedule of BERT and of transformers' get_linear_schedule_with_warmup)."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def resolve_device(name: str = "auto", dist: Distributed | None = None) -> torch.device:
    """`auto`: this process's GPU when CUDA is available, else the CPU."""
    dist = dist or Distributed()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise BertError("train.device is cuda but no CUDA GPU is available: use auto or cpu")
        if device.index is None:
            device = torch.device("cuda", dist.local_rank)
    return device


def resolve_precision(precision: Precision, device: torch.device) -> torch.dtype | None:
    """The autocast dtype (None: plain float32). `auto`: bf16 on a CUDA GPU that has it."""
    if precision == "auto":
        cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if cuda_bf16 else None
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


class NonFiniteLossError(BertError):
    """Too many non-finite steps in a row."""


class TrainingInterrupted(BertError):
    """SIGTERM or Ctrl-C: the current step finished and a checkpoint was written."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


class StopRequest:
    """Turns SIGTERM and SIGINT into a flag the loop checks after each step (main thread only;
    the previous handlers come back on exit). A second Ctrl-C stops at once."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame):
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        log.warning("%s received: finishing this step, then checkpointing", _signal_name(signum))

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def _signal_name(signum: int) -> str:
    return signal.Signals(signum).name


# ------------------------------------------------------------------------------ the trainer
@dataclass
class StepResult:
    """One optimizer step, summed over all micro-batches and processes."""

    step: int  # steps done after this one
    loss: float
    mlm_loss: float
    mlm_accuracy: float
    nsp_loss: float
    nsp_accuracy: float
    learning_rate: float
    grad_norm: float
    tokens: int  # non-padding tokens of the global batch
    skipped: bool
    stop_requested: bool = False


# sums over a logging window: index names
_WINDOW = (
    "mlm_loss_sum",
    "mlm_count",
    "mlm_correct",
    "nsp_loss_sum",
    "nsp_count",
    "nsp_correct",
    "grad_norm_sum",
    "good_steps",
    "tokens",
)


class Trainer:
    """The model, its optimizer, schedule and scaler, and the counters of a run."""

    def __init__(
        self,
        model: BertForPretraining,
        config: TrainConfig,
        batches: PretrainingBatches,
        *,
        device: torch.device | str | None = None,
        dist: Distributed | None = None,
    ):
        self.config = config
        self.dist = dist or Distributed()
        self.device = torch.device(device) if device is not None else resolve_device(
            config.device, self.dist
        )
        self.batches = batches
        self.total_steps = config.total_steps(batches.steps_per_epoch)
        self.autocast_dtype = resolve_precision(config.precision, self.device)
        self.raw_model = model.to(self.device)
        self.model: torch.nn.Module = self.raw_model
        if self.dist.enabled:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = DistributedDataParallel(self.raw_model, device_ids=device_ids)
        if config.compile:
            self.model = torch.compile(self.model)
        self.optimizer = torch.optim.AdamW(
            self.raw_model.param_groups(config.weight_decay),
            lr=config.learning_rate,
            betas=tuple(config.adam_betas),
            eps=config.adam_epsilon,
            fused=self.device.type == "cuda" or None,
        )
        warmup, total = config.warmup_steps, self.total_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: linear_warmup_decay(step, warmup, total)
        )
        fp16 = self.autocast_dtype == torch.float16
        self.scaler = torch.amp.GradScaler(self.device.type) if fp16 else None
        self.step = 0
        self.skipped_steps = 0
        self.nonfinite_in_a_row = 0
        self.tokens_seen = 0
        self.window = torch.zeros(len(_WINDOW), dtype=torch.float64)

    # ----------------------------------------------------------------------- one step
    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def accumulate_gradients(
        self, micro_batches: list[dict[str, torch.Tensor]], stop: bool = False
    ) -> dict[str, float]:
        """Forward and backward over this process's micro-batches, leaving in `.grad` the
        gradient of the whole global batch's loss; returns the global sums and counts.
        `stop`: this process wants to stop after the step (agreed by all processes)."""
        cfg, dist, device = self.config, self.dist, self.device
        self.model.train()
        batches = [
            {k: v.to(device, non_blocking=True) for k, v in mb.items()} for mb in micro_batches
        ]
        # Global counts first: every micro-batch's loss is divided by the whole step's counts.
        counts = torch.zeros(4, dtype=torch.float64, device=device)
        for mb in batches:
            counts[0] += (mb["mlm_labels"] != IGNORE_INDEX).sum()
            counts[1] += (mb["nsp_labels"] != IGNORE_INDEX).sum()
            counts[2] += mb["attention_mask"].sum()
        counts[3] = float(stop)
        dist.all_reduce_sum(counts)
        mlm_count, nsp_count, tokens, stop_votes = counts.tolist()
        mlm_den, nsp_den = max(mlm_count, 1.0), max(nsp_count, 1.0)

        sums = torch.zeros(4, dtype=torch.float64, device=device)  # mlm/nsp loss sum, correct
        for index, mb in enumerate(batches):
            last = index == len(batches) - 1
            sync = contextlib.nullcontext()
            if isinstance(self.model, DistributedDataParallel) and not last:
                sync = self.model.no_sync()  # all-reduce the gradients once, after the last
            with sync:
                with self._autocast():
                    out = self.model(**mb)
                loss = pretraining_loss(out, mlm_den, nsp_den, cfg.mlm_weight, cfg.nsp_weight)
                # DDP averages gradients over processes; the global denominators already did.
                loss = loss * dist.world_size
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            sums += torch.stack(
                [out.mlm_loss_sum, out.mlm_correct, out.nsp_loss_sum, out.nsp_correct]
            ).detach().double()
        dist.all_reduce_sum(sums)
        mlm_loss_sum, mlm_correct, nsp_loss_sum, nsp_correct = sums.tolist()
        return {
            "mlm_loss_sum": mlm_loss_sum,
            "mlm_count": mlm_count,
            "mlm_correct": mlm_correct,
            "nsp_loss_sum": nsp_loss_sum,
            "nsp_count": nsp_count,
            "nsp_correct": nsp_correct,
            "tokens": tokens,
            "stop_votes": stop_votes,
        }

    def train_step(self, micro_batches: list[dict[str, torch.Tensor]], stop: bool = False):
        """One optimizer step over this process's micro-batches (see accumulate_gradients)."""
        cfg = self.config
        g = self.accumulate_gradients(micro_batches, stop)
        mlm_den, nsp_den = max(g["mlm_count"], 1.0), max(g["nsp_count"], 1.0)
        mlm_loss, nsp_loss = g["mlm_loss_sum"] / mlm_den, g["nsp_loss_sum"] / nsp_den
        total_loss = cfg.mlm_weight * mlm_loss + cfg.nsp_weight * nsp_loss
        tokens = g["tokens"]

        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        grad_norm = float(
            torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), cfg.max_grad_norm)
        )
        learning_rate = self.scheduler.get_last_lr()[0]
        loss_finite = math.isfinite(total_loss)
        skipped = not (loss_finite and math.isfinite(grad_norm))
        if not skipped:
            if self.scaler:
                self.scaler.step(self.optimizer)
            else:
                self.optimizer.step()
        if self.scaler:
            self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        with warnings_off():  # LR scheduler warns when the first step was skipped
            self.scheduler.step()
        self.step += 1
        self.tokens_seen += int(tokens)
        if skipped:
            self.skipped_steps += 1
            # With fp16, an overflowing gradient is the scaler's normal business; a
            # non-finite loss (or gradient without a scaler) is a sick run.
            if not loss_finite or self.scaler is None:
                self.nonfinite_in_a_row += 1
            log.warning(
                "step %d skipped: loss %s, gradient norm %s", self.step, total_loss, grad_norm
            )
        else:
            self.nonfinite_in_a_row = 0
            self.window += torch.tensor(
                [g[name] for name in _WINDOW[:6]] + [grad_norm, 1.0, tokens],
                dtype=torch.float64,
            )
        return StepResult(
            step=self.step,
            loss=total_loss,
            mlm_loss=mlm_loss,
            mlm_accuracy=g["mlm_correct"] / mlm_den,
            nsp_loss=nsp_loss,
            nsp_accuracy=g["nsp_correct"] / nsp_den,
            learning_rate=learning_rate,
            grad_norm=grad_norm,
            tokens=int(tokens),
            skipped=skipped,
            stop_requested=g["stop_votes"] > 0,
        )

    def take_window(self) -> dict[str, float]:
        """Means over the steps since the last call (finite steps only), then reset."""
        w = dict(zip(_WINDOW, self.window.tolist(), strict=True))
        self.window.zero_()
        steps = max(w["good_steps"], 1.0)
        mlm_den, nsp_den = max(w["mlm_count"], 1.0), max(w["nsp_count"], 1.0)
        mlm_loss, nsp_loss = w["mlm_loss_sum"] / mlm_den, w["nsp_loss_sum"] / nsp_den
        return {
            "loss": self.config.mlm_weight * mlm_loss + self.config.nsp_weight * nsp_loss,
            "mlm_loss": mlm_loss,
            "mlm_accuracy": w["mlm_correct"] / mlm_den,
            "nsp_loss": nsp_loss,
            "nsp_accuracy": w["nsp_correct"] / nsp_den,
            "grad_norm": w["grad_norm_sum"] / steps,
            "tokens": w["tokens"],
        }

    # --------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Everything but the weights and the RNG states, as plain data."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "step": self.step,
            "skipped_steps": self.skipped_steps,
            "nonfinite_in_a_row": self.nonfinite_in_a_row,
            "tokens_seen": self.tokens_seen,
            "window": self.window.clone(),
            "world_size": self.dist.world_size,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.step = int(state["step"])
        self.skipped_steps = int(state["skipped_steps"])
        self.nonfinite_in_a_row = int(state["nonfinite_in_a_row"])
        self.tokens_seen = int(state["tokens_seen"])
        self.window = state["window"].clone().double()

    @property
    def epoch(self) -> int:
        return self.step // self.batches.steps_per_epoch

    # ----------------------------------------------------------------- checkpoints
    def save_checkpoint(
        self, checkpoints: CheckpointDir, meta: Mapping[str, Any], texts: Mapping[str, str]
    ) -> Path | None:
        """Every process hands its RNG state to rank 0, which commits the checkpoint once all
        processes have finished the step; returns the folder (None on other ranks)."""
        rng = self.dist.all_gather_objects(capture_rng_state())
        self.dist.barrier()
        path = None
        if self.dist.is_main:
            state = {**self.state_dict(), "rng": rng}
            position = {"step": self.step, "epoch": self.epoch,
                        "step_in_epoch": self.step % self.batches.steps_per_epoch}
            path = checkpoints.save(self.step, self.raw_model, state, {**meta, **position}, texts)
        self.dist.barrier()
        return path

    def resume_from(self, checkpoint) -> None:
        """Load weights, optimizer, schedule, scaler, counters and this process's RNG state."""
        checkpoint.load_model(self.raw_model)
        state = checkpoint.load_state()
        self.load_state_dict(state)
        rng = state.get("rng") or []
        if len(rng) == self.dist.world_size:
            restore_rng_state(rng[self.dist.rank])
        else:
            log.warning(
                "checkpoint was written by %d processes, this run has %d: the data order and "
                "masks resume exactly, dropout draws new random numbers",
                len(rng),
                self.dist.world_size,
            )
            torch.manual_seed(self.config.seed + 1000 * self.step + self.dist.rank)


@contextlib.contextmanager
def warnings_off() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ---------------------------------------------------------------------------- the records
TRAIN_COLUMNS = (
    "step",
    "epoch",
    "loss",
    "mlm_loss",
    "mlm_accuracy",
    "nsp_loss",
    "nsp_accuracy",
    "learning_rate",
    "grad_norm",
    "tokens_per_s",
    "skipped_steps",
)
EVAL_COLUMNS = ("step", "mlm_loss", "mlm_accuracy", "perplexity", "nsp_loss", "nsp_accuracy")
TRAIN_LOG = "train_log.tsv"
EVAL_LOG = "eval_log.tsv"


class TsvLog:
    """A TSV file written row by row (flushed, so a crash keeps every row written so far);
    its whole text is also kept to be stored in checkpoints."""

    def __init__(self, path: str | Path | None, columns: tuple[str, ...], previous: str | None):
        self.columns = columns
        header = "\t".join(columns) + "\n"
        self.text = previous if previous and previous.startswith(header) else header
        self.path = Path(path) if path else None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(self.text, encoding="utf-8")

    def last_row(self) -> dict[str, float]:
        """The last row written (e.g. restored from a checkpoint), as numbers; {} if none."""
        lines = self.text.rstrip("\n").split("\n")
        if len(lines) < 2:
            return {}
        values = lines[-1].split("\t")
        return {c: float(v) for c, v in zip(self.columns, values, strict=False) if v != ""}

    def add(self, values: Mapping[str, Any]) -> None:
        row = "\t".join(_format(values.get(c)) for c in self.columns) + "\n"
        self.text += row
        if self.path:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(row)


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.8g}"
    return str(value)


class TrainingRecord:
    """The local record (TSV files) and its mirror in MLflow (optional `tracker`)."""

    def __init__(
        self,
        train_path: str | Path | None = None,
        eval_path: str | Path | None = None,
        tracker: Any = None,
        previous: Mapping[str, str] | None = None,
    ):
        previous = previous or {}
        self.train = TsvLog(train_path, TRAIN_COLUMNS, previous.get(TRAIN_LOG))
        self.eval = TsvLog(eval_path, EVAL_COLUMNS, previous.get(EVAL_LOG))
        self.tracker = tracker

    def log_train(self, row: Mapping[str, Any], extra: Mapping[str, float] = ()) -> None:
        self.train.add(row)
        if self.tracker:
            metrics = {f"train/{k}": v for k, v in row.items() if k not in ("step", "epoch")}
            metrics = {k.replace("train/learning_rate", "lr"): v for k, v in metrics.items()}
            self.tracker.log_metrics({**metrics, **dict(extra), "epoch": row["epoch"]},
                                     step=row["step"])

    def log_eval(self, step: int, metrics: EvalMetrics) -> None:
        values = metrics.to_dict()
        self.eval.add({"step": step, **values})
        if self.tracker:
            keys = EVAL_COLUMNS[1:]
            self.tracker.log_metrics({f"val/{k}": values[k] for k in keys}, step=step)

    def texts(self) -> dict[str, str]:
        return {TRAIN_LOG: self.train.text, EVAL_LOG: self.eval.text}


# ------------------------------------------------------------------------------- the loop
@dataclass
class FitResult:
    steps: int
    tokens_seen: int
    skipped_steps: int
    seconds: float
    last_train: dict[str, float]
    last_eval: EvalMetrics | None
    checkpoint: Path | None


def fit(
    trainer: Trainer,
    *,
    record: TrainingRecord | None = None,
    checkpoints: CheckpointDir | None = None,
    meta: Mapping[str, Any] | None = None,
    evaluate: Callable[[BertForPretraining], EvalMetrics] | None = None,
    on_step: Callable[[StepResult], None] | None = None,
    on_checkpoint: Callable[[Path], None] | None = None,
    stop_after: int | None = None,
    progress: bool | None = None,
) -> FitResult:
    """Train from `trainer.step` to the total number of steps, with logging, periodic
    evaluation and checkpoints.

    `meta` goes into every checkpoint's meta.json (fingerprints, MLflow run id, ...).
    `on_checkpoint(path)` is called on rank 0 after each committed checkpoint.
    `stop_after`: stop (with a checkpoint) after this step, as an interruption would.
    Raises TrainingInterrupted after a SIGTERM/Ctrl-C (checkpoint written) and
    NonFiniteLossError when the loss stays non-finite."""
    cfg, dist = trainer.config, trainer.dist
    record = record or TrainingRecord()
    meta = dict(meta or {})
    total = trainer.total_steps
    spe = trainer.batches.steps_per_epoch
    started = time.perf_counter()
    window_start, window_tokens_base = started, trainer.window[_WINDOW.index("tokens")].item()
    last_train: dict[str, float] = record.train.last_row()  # resumed at the end: not empty
    last_eval: EvalMetrics | None = None
    saved_at: int | None = None
    saved_path: Path | None = None

    def checkpoint() -> None:
        nonlocal saved_at, saved_path
        if trainer.nonfinite_in_a_row:  # never let a sick state replace a good checkpoint
            log.warning("no checkpoint at step %d: the last steps were not finite", trainer.step)
            return
        if checkpoints is not None and saved_at != trainer.step:
            saved_path = trainer.save_checkpoint(checkpoints, meta, record.texts())
            saved_at = trainer.step
            if saved_path is not None and on_checkpoint is not None:
                on_checkpoint(saved_path)

    def run_eval() -> None:
        nonlocal last_eval
        if evaluate is None:
            return
        last_eval = evaluate(trainer.raw_model)
        if dist.is_main:
            record.log_eval(trainer.step, last_eval)
            e = last_eval
            log.info(
                "step %d/%d: train loss %.4f; val MLM loss %.4f accuracy %.4f, NSP accuracy %.4f",
                trainer.step, total, last_train.get("loss", math.nan), e.mlm_loss,
                e.mlm_accuracy, e.nsp_accuracy,
            )

    # tqdm's disable=None shows the bar only on a terminal
    disable = (None if dist.is_main else True) if progress is None else not progress
    bar = tqdm(
        total=total,
        initial=trainer.step,
        desc="pretrain",
        unit="step",
        dynamic_ncols=True,
        disable=disable,
        leave=False,
    )
    with StopRequest() as stop, bar:
        while trainer.step < total:
            epoch, start = divmod(trainer.step, spe)
            for micro_batches in trainer.batches.iterate(epoch, start):
                result = trainer.train_step(micro_batches, stop=stop.signum is not None)
                bar.update(1)
                if on_step:
                    on_step(result)
                if trainer.nonfinite_in_a_row >= cfg.max_nonfinite_steps:
                    last = checkpoints.latest() if checkpoints else None
                    kept = f"checkpoint {last.path} is kept" if last else "no checkpoint exists"
                    raise NonFiniteLossError(
                        f"loss or gradient not finite for {trainer.nonfinite_in_a_row} steps in "
                        f"a row (up to step {trainer.step}): lower train.learning_rate or use "
                        f"train.precision fp32/bf16; {kept}"
                    )
                step = trainer.step
                if step % cfg.log_every == 0 or step == total:
                    now = time.perf_counter()
                    window = trainer.take_window()
                    tokens_per_s = (window["tokens"] - window_tokens_base) / max(
                        now - window_start, 1e-9
                    )
                    window_start, window_tokens_base = now, 0.0
                    last_train = {
                        "step": step,
                        "epoch": round(step / spe, 4),
                        **{k: window[k] for k in ("loss", "mlm_loss", "mlm_accuracy",
                                                  "nsp_loss", "nsp_accuracy", "grad_norm")},
                        "learning_rate": result.learning_rate,
                        "tokens_per_s": tokens_per_s,
                        "skipped_steps": trainer.skipped_steps,
                    }
                    if dist.is_main:
                        record.log_train(
                            last_train,
                            extra={"tokens_per_s_per_process": tokens_per_s / dist.world_size},
                        )
                    bar.set_postfix(
                        loss=f"{window['loss']:.3f}",
                        lr=f"{result.learning_rate:.2e}",
                        tok_s=f"{tokens_per_s:,.0f}",
                        refresh=False,
                    )
                if cfg.eval_every and step % cfg.eval_every == 0 and step != total:
                    run_eval()
                if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                    checkpoint()
                if result.stop_requested or (stop_after is not None and step >= stop_after):
                    checkpoint()
                    if result.stop_requested:
                        signum = stop.signum or signal.SIGTERM
                        if saved_at == step and saved_path is not None:
                            saved = f"checkpoint written in {saved_path}; run again to resume"
                        else:
                            saved = "no checkpoint written for this step"
                        raise TrainingInterrupted(
                            f"interrupted by {_signal_name(signum)} after step {step}: {saved}",
                            signum,
                        )
                    return _result(trainer, started, last_train, last_eval, saved_path)
                if step >= total:
                    break
        run_eval()
        checkpoint()
    return _result(trainer, started, last_train, last_eval, saved_path)


def _result(trainer, started, last_train, last_eval, saved_path) -> FitResult:
    return FitResult(
        steps=trainer.step,
        tokens_seen=trainer.tokens_seen,
        skipped_steps=trainer.skipped_steps,
        seconds=time.perf_counter() - started,
        last_train=last_train,
        last_eval=last_eval,
        checkpoint=saved_path,
    )


def micro_batches_of(batch: Mapping[str, torch.Tensor], parts: int) -> list[dict]:
    """Cut one collated batch into `parts` equal micro-batches (tests, benchmarks)."""
    size = next(iter(batch.values())).shape[0]
    require(size % parts == 0, "parts", parts, f"a divisor of the batch size {size}")
    step = size // parts
    return [{k: v[i * step : (i + 1) * step] for k, v in batch.items()} for i in range(parts)]

