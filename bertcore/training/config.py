"""The params sections pretraining reads: `train` (how long, how fast, on what, and how often
to record), `masking`, `eval`, `phase2` (BERT's second phase), `cpu`, and `PretrainConfig`,
all of them checked against each other.

Nothing here imports torch: a stage parses its params, and refuses a bad one, before it
imports what computes. The code that uses them: `bertcore.training.loop.trainer` (with
`bertcore.training.loop.step` for one step), `masking`, `evaluation`, `phases`, `cpu`, `pretrain`;
the defaults here are those of the shipped params.yaml without its recipe (`model.recipe: none`:
the edge merges a recipe's values into the sections before they reach these classes).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import field
from typing import Literal

from pydantic import model_validator

from bertcore.common.config import Device, Precision
from bertcore.common.errors import BertError, ConfigError, require
from bertcore.common.schedule import Schedule, StepSchedule
from bertcore.common.tracking import TrackingConfig
from bertcore.common.validation import (
    Bool,
    Float,
    Int,
    checked,
    integer,
    number,
    params_section,
)
from bertcore.data.samples.config import Phase2Samples
from bertcore.model.config import ModelConfig

# train.compile: false (eager), true (torch.compile; a graph break splits the graph and runs
# the pieces), fullgraph (torch.compile that raises on a graph break instead of running slower).
CompileMode = Bool | Literal["fullgraph"]


# The constraints of a schedule, shared by `train` and BERT's second phase (`phase2`).
Steps = integer(ge=1)  # optimizer steps
BatchSize = integer(ge=1)  # sequences per optimizer step, over all micro-batches and processes
# the global batch's micro-batches: each its own gradient, summed in a fixed binary tree, so a
# power of two (training/hardware/fixed_sum.py)
MicroBatches = checked(Int, lambda n: n >= 1 and n & (n - 1) == 0,
                       "a power of two: 1, 2, 4, 8, ...")
# the keys before micro_batches (the same cut of the batch, then of any count)
MICRO_BATCHES_RENAMED = {"gradient_accumulation_steps": (
    "renamed micro_batches: the number of micro-batches the batch is cut into, each its own "
    "gradient, added in one fixed order; a power of two: 1, 2, 4, 8, ... (docs/training.md)")}
# tokens: each step draws its samples from one bin of lengths this wide (training/data/order.py)
LengthBinWidth = integer(ge=1, allowed="an integer >= 1 (tokens), or null")
LearningRate = number(gt=0)
WarmupSteps = integer(ge=0)
AdamBetas = checked(list[Float], lambda betas: len(betas) == 2 and all(0 <= b < 1 for b in betas),
                    "two numbers in [0, 1)")


def require_whole_micro_batches(batch_size: int, micro_batches: int, section: str = "") -> None:
    """A batch splits into `micro_batches` micro-batches of one size. `section`: the prefix of
    the message's micro_batches ("phase2.")."""
    require(batch_size % micro_batches == 0, "batch_size", batch_size,
            f"a multiple of {section}micro_batches ({micro_batches})")


@params_section(renamed=MICRO_BATCHES_RENAMED)
class TrainConfig:
    """The `train:` section of params.yaml."""

    # optimizer steps; null: `epochs` passes over the samples
    max_steps: Steps | None = 1500
    epochs: number(gt=0) | None = None
    # wall-clock budget: fewer steps when they would not fit
    max_minutes: number(gt=0, allowed="a number > 0 or null") | None = None
    batch_size: BatchSize = 32
    # the global batch's micro-batches, each its own gradient, summed in one fixed order; the
    # processes take equal shares (1, 2 or 4 of them with 4): the bytes do not depend on how many
    micro_batches: MicroBatches = 4
    length_bin_width: LengthBinWidth | None = None  # null: a step's samples of any length
    learning_rate: LearningRate = 0.002  # peak, after the warmup
    warmup_steps: WarmupSteps = 150
    # after the warmup: linear (BERT's: decay to 0 at the end) | wsd (the peak held, then
    # decay to 0 over the last decay_fraction of the steps); common/schedule.py
    schedule: Schedule = "linear"
    decay_fraction: number(gt=0, le=1) = 0.2  # wsd only
    weight_decay: number(ge=0) = 0.01  # not on biases and LayerNorm
    # BERT's; a recipe may set others (params/recipes/tiny.yaml: beta2 0.98). A list: a
    # checkpoint records it as JSON and compares it with the run's
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
    # >1: the pretrain stage relaunches itself under torchrun; auto: one per core (GPU), the
    # most that split micro_batches (both phases') evenly (`processes_for`)
    nproc_per_node: integer(ge=1, allowed="an integer >= 1, or auto") | Literal["auto"] = "auto"
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
        require_whole_micro_batches(self.batch_size, self.micro_batches)
        return self

    def total_steps(self, steps_per_epoch: int) -> int:
        """The optimizer steps this section trains: `max_steps`, or `epochs` over batches of
        `steps_per_epoch`."""
        if self.max_steps is not None:
            return self.max_steps
        return max(1, math.ceil(self.epochs * steps_per_epoch))

    def rate_schedule(self, start: int, end: int) -> StepSchedule:
        """The learning rate of each step of a phase that trains steps start+1 .. end on this
        section's peak, warmup and schedule."""
        return StepSchedule(self.learning_rate, self.warmup_steps, start, end, self.schedule,
                            self.decay_fraction)


@params_section(frozen=True)
class MaskingConfig:
    """The `masking:` section of params.yaml."""

    # 30%, not BERT's 15%: more predictions per sequence learn faster when sequences are few
    # (Wettig et al. 2022); 40 slots hold 30% of a 128-token sequence
    mlm_probability: number(gt=0, lt=1) = 0.3
    max_predictions_per_seq: integer(ge=1) = 40
    whole_word: Bool = False


@params_section
class EvalConfig:
    """The `eval:` section of params.yaml."""

    batch_size: integer(ge=1) = 64
    seed: Int = 1234  # seeds the fixed masks of the val split
    # cap for the periodic evaluation during pretraining
    max_batches: integer(ge=1, allowed="null or an integer >= 1") | None = None
    # val sentences of the built-in probes scored at each periodic evaluation (0: none)
    probe_sentences: integer(ge=0) = 100


@params_section(frozen=True, renamed=MICRO_BATCHES_RENAMED)
class Phase2Config(Phase2Samples):
    """The `phase2:` section of params.yaml (`enabled` and `max_seq_length` are also the
    samples stage's, see `Phase2Samples`)."""

    max_steps: Steps = 150  # optimizer steps of phase 2, numbered on from phase 1's
    batch_size: BatchSize = 8  # its global batch (32 x 128 tokens = 8 x 512)
    micro_batches: MicroBatches = 4
    # each step's samples from one bin of lengths 32 tokens wide: 3% of the tokens are padding
    # at 512 on the built-in corpus, not 39% (docs/training.md)
    length_bin_width: LengthBinWidth | None = 32
    learning_rate: LearningRate = 0.001  # its peak, after its own warmup
    warmup_steps: WarmupSteps = 15

    @model_validator(mode="after")
    def _whole_micro_batches(self) -> Phase2Config:
        require_whole_micro_batches(self.batch_size, self.micro_batches, "phase2.")
        return self

    def train_config(self, train: TrainConfig) -> TrainConfig:
        """Phase 2's training config: `train`'s, with this phase's length, batch and schedule."""
        return dataclasses.replace(
            train, max_steps=self.max_steps, epochs=None, max_minutes=None,
            batch_size=self.batch_size,
            micro_batches=self.micro_batches,
            length_bin_width=self.length_bin_width, learning_rate=self.learning_rate,
            warmup_steps=self.warmup_steps)


def require_process_count(processes: int, micro_batches: int, section: str = "train.") -> None:
    """BertError in one line unless `processes` split `micro_batches` into equal subtrees of
    the fixed sum: a power of two that divides it."""
    if processes & (processes - 1) or micro_batches % processes:
        fits = [str(2**k) for k in range(micro_batches.bit_length())]
        fits = (", ".join(fits[:-1]) + " or " + fits[-1] + " processes" if len(fits) > 1
                else "1 process")
        more = ("" if processes & (processes - 1) else
                f", or raise {section}micro_batches to {processes}")
        raise BertError(f"{processes} processes cannot share {section}micro_batches "
                        f"({micro_batches}) evenly in its fixed sum: run {fits} "
                        f"(a power of two that divides it){more}")


@params_section(frozen=True)
class PretrainConfig:
    """The params sections pretraining reads, parsed and validated (each on its own, and here
    against each other)."""

    model: ModelConfig
    masking: MaskingConfig
    train: TrainConfig
    eval: EvalConfig
    tracking: TrackingConfig
    phase2: Phase2Config = field(default_factory=Phase2Config)

    @model_validator(mode="after")
    def _phase2_after_a_fixed_phase1(self) -> PretrainConfig:
        if self.phase2.enabled and self.train.max_minutes is not None:
            raise ConfigError("phase2.enabled", "true needs a fixed phase 1: set "
                                                "train.max_minutes: null (a time budget would "
                                                "make the step phase 2 starts at depend on the "
                                                "machine)")
        return self

    def _micro_batches(self) -> dict[str, int]:
        """The micro-batches of each phase that runs, by the prefix of its params."""
        counts = {"train.": self.train.micro_batches}
        if self.phase2.enabled:
            counts["phase2."] = self.phase2.micro_batches
        return counts

    def require_processes(self, processes: int) -> None:
        """BertError in one line unless `processes` split every phase's micro-batches."""
        for section, micro_batches in self._micro_batches().items():
            require_process_count(processes, micro_batches, section)

    def processes_for(self, devices: int) -> int:
        """`train.nproc_per_node: auto` on `devices` cores (GPUs): the most processes, at most
        one per device, that split every phase's micro-batches (a power of two)."""
        most = min([max(1, devices), *self._micro_batches().values()])
        return 1 << (most.bit_length() - 1)
