"""The `train:` section of params.yaml: how long, how fast, on what, and how often to record.

The loop that uses it lives in `bertcore.training.loop` (with `bertcore.training.step` for one
step); the defaults here are those of the shipped params.yaml.
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Literal

from pydantic import model_validator

from bertcore.common.errors import require
from bertcore.common.validation import Bool, Float, Int, checked, integer, number, params_section
from bertcore.training.devices import Device, Precision

# train.compile: false (eager), true (torch.compile; a graph break splits the graph and runs
# the pieces), fullgraph (torch.compile that raises on a graph break instead of running slower).
CompileMode = Bool | Literal["fullgraph"]


# The constraints of a schedule, shared by `train` and BERT's second phase (`phase2`).
Steps = integer(ge=1)  # optimizer steps
BatchSize = integer(ge=1)  # sequences per optimizer step, over all micro-batches and processes
AccumulationSteps = integer(ge=1)
# tokens: each step draws its samples from one bin of lengths this wide (training/order.py)
LengthBinWidth = integer(ge=1, allowed="an integer >= 1 (tokens), or null")
LearningRate = number(gt=0)
WarmupSteps = integer(ge=0)
AdamBetas = checked(list[Float], lambda betas: len(betas) == 2 and all(0 <= b < 1 for b in betas),
                    "two numbers in [0, 1)")


def require_whole_micro_batches(batch_size: int, accumulation: int, section: str = "") -> None:
    """A batch splits into `accumulation` micro-batches of one size. `section`: the prefix of
    the message's gradient_accumulation_steps ("phase2.")."""
    require(batch_size % accumulation == 0, "batch_size", batch_size,
            f"a multiple of {section}gradient_accumulation_steps ({accumulation})")


@params_section
class TrainConfig:
    """The `train:` section of params.yaml."""

    # optimizer steps; null: `epochs` passes over the samples
    max_steps: Steps | None = 1500
    epochs: number(gt=0) | None = None
    # wall-clock budget: fewer steps when they would not fit
    max_minutes: number(gt=0, allowed="a number > 0 or null") | None = None
    batch_size: BatchSize = 32
    gradient_accumulation_steps: AccumulationSteps = 1
    length_bin_width: LengthBinWidth | None = None  # null: a step's samples of any length
    learning_rate: LearningRate = 0.002  # peak, after the warmup
    warmup_steps: WarmupSteps = 150
    weight_decay: number(ge=0) = 0.01  # not on biases and LayerNorm
    adam_betas: AdamBetas = field(default_factory=lambda: [0.9, 0.999])
    adam_epsilon: number(gt=0) = 1e-6
    max_grad_norm: number(gt=0) = 1.0
    mlm_weight: number(ge=0) = 1.0
    nsp_weight: number(ge=0) = 1.0
    precision: Precision = "auto"  # auto: bf16 on CUDA, fp32 on CPU
    device: Device = "auto"  # auto: cuda if available, else cpu
    log_every: integer(ge=1) = 10
    eval_every: integer(ge=0) = 250  # 0: only at the end
    checkpoint_every: integer(ge=0) = 250  # 0: only at the end (and on interruption)
    keep_last: integer(ge=1) = 2
    # the checkpoints a run replaces (other params; shortened below them): set aside in
    # replaced/ (false: deleted)
    keep_replaced: Bool = True
    # this many non-finite steps in a row stop the run
    max_nonfinite_steps: integer(ge=1) = 10
    num_workers: integer(ge=0) = 0  # DataLoader workers per process
    compile: CompileMode = False  # torch.compile the model (fullgraph: fail on a graph break)
    # >1: the pretrain stage relaunches itself under torchrun
    nproc_per_node: integer(ge=1) = 1
    max_restarts: integer(ge=0) = 0  # torchrun restarts after a worker failure (each resumes)
    seed: Int = 42

    @model_validator(mode="after")
    def _one_length_and_whole_micro_batches(self) -> TrainConfig:
        require(
            (self.max_steps is None) != (self.epochs is None),
            "max_steps",
            self.max_steps,
            "a number of steps, or null with train.epochs set (exactly one of the two)",
        )
        require_whole_micro_batches(self.batch_size, self.gradient_accumulation_steps)
        return self

    def total_steps(self, steps_per_epoch: int) -> int:
        if self.max_steps is not None:
            return self.max_steps
        return max(1, math.ceil(self.epochs * steps_per_epoch))
