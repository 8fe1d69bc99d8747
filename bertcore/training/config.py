"""The `train:` section of params.yaml: how long, how fast, on what, and how often to record.

The loop that uses it lives in `bertcore.training.loop` (with `bertcore.training.step` for one
step); the defaults here are those of the shipped params.yaml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from bertcore.common.errors import require
from bertcore.training.devices import Precision

# train.compile: false (eager), true (torch.compile; a graph break splits the graph and runs
# the pieces), fullgraph (torch.compile that raises on a graph break instead of running slower).
CompileMode = bool | Literal["fullgraph"]


@dataclass
class TrainConfig:
    """The `train:` section of params.yaml."""

    max_steps: int | None = 1500  # optimizer steps; null: `epochs` passes over the samples
    epochs: float | None = None
    max_minutes: float | None = None  # wall-clock budget: fewer steps when they would not fit
    batch_size: int = 32  # sequences per optimizer step, over all micro-batches and processes
    gradient_accumulation_steps: int = 1
    learning_rate: float = 0.002  # peak, after the warmup
    warmup_steps: int = 150
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
    compile: CompileMode = False  # torch.compile the model (fullgraph: fail on a graph break)
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
        if self.max_minutes is not None:
            require(self.max_minutes > 0, "max_minutes", self.max_minutes, "a number > 0 or null")
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
        require(isinstance(self.compile, bool) or self.compile == "fullgraph", "compile",
                self.compile, "false, true or fullgraph")
        require(self.num_workers >= 0, "num_workers", self.num_workers, "an integer >= 0")
        require(self.nproc_per_node >= 1, "nproc_per_node", self.nproc_per_node, "an int >= 1")
        require(self.max_restarts >= 0, "max_restarts", self.max_restarts, "an integer >= 0")

    def total_steps(self, steps_per_epoch: int) -> int:
        if self.max_steps is not None:
            return self.max_steps
        return max(1, math.ceil(self.epochs * steps_per_epoch))
