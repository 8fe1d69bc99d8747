"""One optimizer step, without the host ever waiting on the device.

One optimizer step consumes one global batch of `batch_size` sequences, cut into
`micro_batches` micro-batches, shared evenly by the `world_size` processes. Both losses are
divided by their counts over the WHOLE step (all micro-batches, all processes), so the
micro-batches compute the gradient of one big batch; each micro-batch's gradient is computed
on its own and they are added in a fixed binary tree over their numbers
(`bertcore.training.hardware.fixed_sum`), within each process and then across them, so the
gradient, and every step after it, has the same bytes for 1, 2, 4, ... processes (with the
same kernels and threads per process). Every process then holds the same gradient and takes
the same optimizer step: no DDP.

On a GPU the CPU runs ahead of the device; a step must not make it wait (`.item()`, `float(t)`,
`bool(t)`, a data-dependent shape). So everything a step computes stays on the device: the
global counts that divide the losses (all-reduced with each process's stop vote), the gradient
norm, whether the step was finite, and the metrics, which are summed into device tensors and
read back in one transfer by `read_counters()` on the loop's sync steps (those that log,
evaluate, checkpoint or stop: see `bertcore.training.loop.trainer`).

A step whose loss or gradient is not finite is skipped without a branch on the host: fused
AdamW takes a `found_inf` tensor and leaves weights, moments and its step count untouched
when it is set (as it does for GradScaler), and the metrics of the step are masked out.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from bertcore.common.devices import autocast, resolve_device, resolve_precision
from bertcore.common.schedule import StepSchedule
from bertcore.model.bert import IGNORE_INDEX, BertPretrainingModel, pretraining_loss
from bertcore.training.checkpoints.checkpoint import (
    Checkpoint,
    restore_rng_state,
)
from bertcore.training.config import CompileMode, TrainConfig
from bertcore.training.data.batches import PretrainingBatches
from bertcore.training.hardware.distributed import Distributed
from bertcore.training.hardware.fixed_sum import TreeSum
from bertcore.training.loop.state import TOTALS, WINDOW, LoggingWindow, TrainingState

log = logging.getLogger(__name__)

# What a StepResult holds, in the order of its device tensor.
STEP_VALUES = ("loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy", "grad_norm",
               "tokens", "skipped")


@dataclass
class StepResult:
    """One optimizer step, summed over all micro-batches and processes. The numbers stay on
    the device until one of them is read (which waits for the step to finish)."""

    step: int  # steps done after this one
    learning_rate: float
    values: torch.Tensor = field(repr=False)  # STEP_VALUES, on the device

    @functools.cached_property
    def _read(self) -> dict[str, float]:
        return dict(zip(STEP_VALUES, self.values.tolist(), strict=True))

    loss = property(lambda self: self._read["loss"])
    mlm_loss = property(lambda self: self._read["mlm_loss"])
    mlm_accuracy = property(lambda self: self._read["mlm_accuracy"])
    nsp_loss = property(lambda self: self._read["nsp_loss"])
    nsp_accuracy = property(lambda self: self._read["nsp_accuracy"])
    grad_norm = property(lambda self: self._read["grad_norm"])
    tokens = property(lambda self: int(self._read["tokens"]))  # non-padding, global batch
    skipped = property(lambda self: bool(self._read["skipped"]))


@dataclass(frozen=True)
class PhaseSteps:
    """What a StepRunner steps through in one phase: the phase's config (batch, schedule, loss
    weights), its batches, the steps done before it (`start`) and the epoch it starts in
    (phase 1: 0; BERT's second phase numbers its steps and epochs on from phase 1's, see
    `bertcore.training.run.phases`). Where it is planned to end is the run's plan's to say
    (`bertcore.training.run.plan`), and the Trainer's to train to."""

    config: TrainConfig
    batches: PretrainingBatches
    start: int = 0
    first_epoch: int = 0

    def configured_end(self) -> int:
        """The step `config` ends the phase at (`max_steps`, or `epochs` of its batches, after
        `start`): for a runner stepped without a plan."""
        return self.start + self.config.total_steps(self.batches.steps_per_epoch)

    def configured_schedule(self) -> StepSchedule:
        """The phase's learning rate per step, ending where `config` ends it."""
        return self.config.rate_schedule(self.start, self.configured_end())

    def position(self, step: int) -> tuple[int, int]:
        """(epoch, step within it) of the step after `step`: which batch, and which masks,
        it draws."""
        epoch, within = divmod(step - self.start, self.batches.steps_per_epoch)
        return self.first_epoch + epoch, within

    def epochs_done(self, step: int) -> float:
        """Passes over the data after `step` (over phase 1's samples, then over phase 2's)."""
        return self.first_epoch + (step - self.start) / self.batches.steps_per_epoch


def compile_model(model: torch.nn.Module, mode: CompileMode,
                  backend: str = "inductor") -> torch.nn.Module:
    """`model` under torch.compile as `train.compile` asks (`mode` true or fullgraph; false
    leaves it eager). With fullgraph a graph break raises when the first step is traced, so a
    model or torch version that breaks the graph fails loudly instead of running slower."""
    if not mode:
        return model
    return torch.compile(model, backend=backend, fullgraph=mode == "fullgraph")


class StepRunner:
    """Runs optimizer steps: holds the model (with its torch.compile wrapper), its
    fused AdamW and scaler, the phase it steps through (`phase`), where the run stands
    (`state`) and the logging window (`window`)."""

    def __init__(
        self,
        model: BertPretrainingModel,
        config: TrainConfig,
        batches: PretrainingBatches,
        *,
        device: torch.device | str | None = None,
        dist: Distributed | None = None,
    ):
        """`config` and `batches`: the first phase, of the length `config` sets (another
        phase follows by setting `phase`: the model, its wrappers and the optimizer stay)."""
        self.dist = dist or Distributed()
        self.device = torch.device(device) if device is not None else resolve_device(
            config.device, self.dist.local_rank
        )
        self.phase = PhaseSteps(config, batches)
        self.autocast_dtype = resolve_precision(config.precision, self.device)
        self.raw_model = model.to(self.device)
        for tensor in self.raw_model.state_dict().values():  # rank 0's weights everywhere
            self.dist.broadcast_(tensor)
        self.model = compile_model(self.raw_model, config.compile)
        self.parameters = [p for p in self.raw_model.parameters() if p.requires_grad]
        # Fused AdamW (CPU and CUDA): one kernel, and it skips a step on `found_inf`.
        self.optimizer = torch.optim.AdamW(
            self.raw_model.param_groups(config.weight_decay),
            lr=config.learning_rate,
            betas=tuple(config.adam_betas),
            eps=config.adam_epsilon,
            fused=True,
        )
        fp16 = self.autocast_dtype == torch.float16
        self.scaler = torch.amp.GradScaler(self.device.type) if fp16 else None
        self.state = TrainingState(self.device)
        self.window = LoggingWindow(self.device)
        self._stop_flag = torch.zeros((), dtype=torch.float64, device=self.device)

    @property
    def config(self) -> TrainConfig:
        return self.phase.config

    @property
    def batches(self) -> PretrainingBatches:
        return self.phase.batches

    @property
    def step(self) -> int:
        return self.state.step

    # ----------------------------------------------------------------------- one step
    def accumulate_gradients(
        self, micro_batches: list[dict[str, torch.Tensor]], stop: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward over this process's micro-batches, each its own gradient,
        leaving in `.grad` the gradient of the whole global batch's loss: every micro-batch's
        gradient added in the fixed tree over their numbers (`fixed_sum`), the same bytes on
        every process and for any number of them. Returns two device tensors over all
        processes: counts [mlm, nsp, tokens, stop votes] and sums [mlm loss, mlm correct,
        nsp loss, nsp correct] (in the same tree). `stop`: this process wants to stop (a
        sticky vote)."""
        cfg, dist, device = self.config, self.dist, self.device
        self.model.train()
        batches = [
            {k: v.to(device, non_blocking=True) for k, v in mb.items()} for mb in micro_batches
        ]
        if stop:
            self._stop_flag.fill_(1.0)  # a kernel with a constant: no transfer, no wait
        # Global counts first: every micro-batch's loss is divided by the whole step's counts
        # (whole numbers: all-reduced exactly in any order).
        local = [
            torch.stack([(mb["mlm_targets"] != IGNORE_INDEX).sum(),
                         (mb["nsp_labels"] != IGNORE_INDEX).sum(),
                         mb["attention_mask"].sum()])
            for mb in batches
        ]
        counts = torch.cat([torch.stack(local).sum(0).double(), self._stop_flag[None]])
        dist.all_reduce_sum(counts)
        mlm_den, nsp_den = counts[0].float().clamp_min(1), counts[1].float().clamp_min(1)

        gradients, sums = TreeSum(), TreeSum()
        first = self.batches.first_micro_batch
        for index, mb in enumerate(batches):
            # dropout drawn per micro-batch, by its number in the step, not by the process
            torch.manual_seed(micro_batch_seed(cfg.seed, self.step, first + index))
            with autocast(device, self.autocast_dtype):
                out = self.model(**mb)
            loss = pretraining_loss(out, mlm_den, nsp_den, cfg.mlm_weight, cfg.nsp_weight)
            (self.scaler.scale(loss) if self.scaler else loss).backward()
            gradients.add(self._take_gradient())
            sums.add(torch.stack(
                [out.mlm_loss_sum, out.mlm_correct, out.nsp_loss_sum, out.nsp_correct]
            ).detach().double())
        self._put_gradient(dist.tree_sum(gradients.total))
        return counts, dist.tree_sum(sums.total)

    def _take_gradient(self) -> torch.Tensor:
        """The micro-batch's gradient, flat (zero where a parameter got none), taken out of
        `.grad`."""
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in self.parameters])
        for p in self.parameters:
            p.grad = None
        return flat

    def _put_gradient(self, flat: torch.Tensor) -> None:
        """`flat` (as `_take_gradient` lays it out) into `.grad`, as views of it."""
        offset = 0
        for p in self.parameters:
            p.grad = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()

    def train_step(self, micro_batches: list[dict[str, torch.Tensor]], stop: bool = False,
                   learning_rate: float | None = None) -> StepResult:
        """One optimizer step over this process's micro-batches (see accumulate_gradients), at
        `learning_rate` (the Trainer's schedule at this step; None: the phase's schedule as
        its params set it, for a runner stepped without a Trainer)."""
        cfg = self.config
        counts, sums = self.accumulate_gradients(micro_batches, stop)
        mlm_den, nsp_den = counts[0].clamp_min(1), counts[1].clamp_min(1)
        mlm_loss, nsp_loss = sums[0] / mlm_den, sums[2] / nsp_den
        total_loss = cfg.mlm_weight * mlm_loss + cfg.nsp_weight * nsp_loss

        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.raw_model.parameters(), cfg.max_grad_norm
        ).double()
        loss_finite = torch.isfinite(total_loss)
        good = loss_finite & torch.isfinite(grad_norm)
        rate = (learning_rate if learning_rate is not None
                else self.phase.configured_schedule()(self.step))
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        self.optimizer.found_inf = (~good).float()  # fused AdamW: skip the update when set
        self.optimizer.step()
        if self.scaler:
            self.scaler.update()  # its own overflow check (in unscale_) sets the next scale
        self.optimizer.zero_grad(set_to_none=True)

        # The counters, on the device. With fp16 an overflowing gradient is the scaler's
        # normal business; a non-finite loss (or gradient without a scaler) is a sick run.
        skipped = ~good
        self.state.count(skipped, ~loss_finite if self.scaler else skipped, counts[2],
                         counts[3])
        tokens = counts[2]
        self.window.add(good, torch.stack([sums[0], counts[0], sums[1], sums[2], counts[1],
                                           sums[3], grad_norm, torch.ones_like(grad_norm),
                                           tokens]))
        values = torch.stack([total_loss, mlm_loss, sums[1] / mlm_den, nsp_loss,
                              sums[3] / nsp_den, grad_norm, tokens, skipped.double()])
        return StepResult(step=self.step, learning_rate=rate, values=values.detach())

    # ------------------------------------------------------------- reading the device
    def synchronize(self) -> None:
        """Wait until the device has finished the queued work (to read a clock)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elif self.device.type == "mps":
            torch.mps.synchronize()

    def read_counters(self) -> dict[str, float]:
        """The window's sums and the run's counters, in one transfer (the host waits here:
        call it on logging, evaluation and checkpoint steps only). Resets the worst run of
        non-finite steps seen since the last call."""
        both = torch.cat([self.window.sums, self.state.counters.double()]).tolist()
        self.state.forget_worst_run()
        return dict(zip(WINDOW + TOTALS, both, strict=True))

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self, planned_end: int) -> dict[str, Any]:
        """Everything but the weights and the RNG states, as plain data; `planned_end`: where
        the run is planned to end (a record: a resumed run plans its own end)."""
        totals = self.state.totals()
        return {
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "step": self.step,
            "total_steps": planned_end,
            **{name: totals[name] for name in ("skipped_steps", "nonfinite_in_a_row",
                                               "tokens_seen")},
            "window": self.window.state_dict(),
            "world_size": self.dist.world_size,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state_dict; its `total_steps` is not read back: the schedule follows the
        end the resumed run plans (a run whose length changed resumes on the re-planned
        schedule)."""
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.state.load_state_dict(state)
        self.window.load_state_dict(state["window"])

    def resume_from(self, checkpoint: Checkpoint) -> None:
        """Load weights, optimizer, scaler, counters and this process's RNG state."""
        checkpoint.load_model(self.raw_model)
        state = checkpoint.load_state()
        self.load_state_dict(state)
        rng = state.get("rng") or []
        if len(rng) == self.dist.world_size:
            restore_rng_state(rng[self.dist.rank])
        # else: written by another number of processes; nothing the steps draw depends on
        # it (dropout is seeded per micro-batch: `micro_batch_seed`)


def micro_batch_seed(seed: int, step: int, micro_batch: int) -> int:
    """The seed of the dropout of micro-batch `micro_batch` of optimizer step `step`: the
    same whichever process computes it."""
    digest = hashlib.sha256(f"{seed}/{step}/{micro_batch}".encode()).digest()
    return int.from_bytes(digest[:8], "little")
