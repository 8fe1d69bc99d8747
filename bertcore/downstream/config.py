"""The params sections of the downstream stages (`finetune:`, `prune:`; `glue:`'s is
`glue/config.py`) and the fine-tuning recipe they share, with the keys of a section that
fine-tunes (`RecipeSection`).

A `Recipe` is how one model is fine-tuned: AdamW, a linear warmup then linear decay to 0,
gradients clipped, a step cap for a CPU. `finetune` makes one from its section, `glue` one per
seed (and per point of Turc et al.'s grid); `bertcore.downstream.finetune.train_classifier` runs
it, the one fine-tuning loop of the project.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal

from pydantic import model_validator

from bertcore.common.config import Device
from bertcore.common.errors import ConfigError, require, yaml_text
from bertcore.common.validation import (
    Allowed,
    Bool,
    Int,
    checked,
    integer,
    number,
    params_section,
    text,
)
from bertcore.downstream.builtin_tasks import BUILTIN_TASKS

# learning_rate: auto, by hidden size. The GLUE recipe's 4e-5 (BERT-base, Cramming) is far too
# low for a 2-layer model. Turc et al. (2019) searched rates per miniature size (3e-4, 1e-4,
# 5e-5, 3e-5); measured here on BERT-tiny, the top of their grid gave the pretrained model its
# best: builtin:same-document 0.582 at 3e-4 vs 0.550 at 1e-3, a 10-topic set 0.898 vs 0.906
# (docs/finetune.md). Between tiny and base, their grid's 1e-4 (not measured here).
AUTO_LEARNING_RATES: tuple[tuple[int | None, float], ...] = ((128, 3e-4), (512, 1e-4), (None, 4e-5))

LearningRate = Annotated[number(gt=0) | Literal["auto"], Allowed("auto or a number > 0")]
# finetune.seed, glue.seed: numpy's generators take no negative seed, torch none of 2**64
Seed = integer(ge=0, le=2**63 - 1)
# finetune.workers, glue.workers: processes that fine-tune at once (0: one per core)
Workers = integer(ge=0, le=1024, allowed="0..1024 (0: one per core)")
# the keys whose default differs between the sections (each section gives its own)
BatchSize = integer(ge=1)
Epochs = number(gt=0)
MaxSteps = integer(ge=1, allowed="null or an integer >= 1") | None
SeedCount = integer(ge=1)


@dataclass
class RecipeSection:
    """The keys of a section that fine-tunes (`finetune:`, `glue:`), after its own: the
    recipe, the length, the seeds, the device and the workers. A section is `class
    XConfig(RecipeSection, XKeys)`, its own keys in XKeys: a dataclass lists the fields of its
    last base first, so the section's keys keep their order (a model card lists them so)."""

    max_seq_length: integer(ge=8) = 128  # longer inputs are truncated (counted in the metrics)
    learning_rate: LearningRate = "auto"  # auto: by the model's width (AUTO_LEARNING_RATES)
    batch_size: BatchSize = field(kw_only=True)
    epochs: Epochs = field(kw_only=True)
    max_steps: MaxSteps = field(kw_only=True)  # cap on the optimizer steps; null: no cap
    warmup_fraction: number(ge=0, lt=1) = 0.1
    weight_decay: number(ge=0) = 0.01
    max_grad_norm: number(gt=0) = 1.0
    seed: Seed = 42
    seeds: SeedCount = field(kw_only=True)  # fine-tunes of each recipe: seed, seed + 1, ...
    device: Device = "auto"
    # fine-tunes at once, each in a process of its own (cpu.threads each); 0: one per core
    # (one on a GPU). The outputs do not depend on it
    workers: Workers = 0

    def learning_rates(self) -> tuple[float | str, ...]:
        """Every learning rate the section fine-tunes with."""
        return (self.learning_rate,)

    @model_validator(mode="after")
    def _weights_decay(self) -> RecipeSection:
        require_decay_below_one(*self.learning_rates(), weight_decay=self.weight_decay)
        return self


def recipe_for(section: RecipeSection, hidden_size: int) -> Recipe:
    """The section's recipe for a model of this width, an `auto` learning rate resolved to the
    rate of AUTO_LEARNING_RATES that fits the width."""
    rate = (next(rate for width, rate in AUTO_LEARNING_RATES
                 if width is None or hidden_size <= width)
            if section.learning_rate == "auto" else float(section.learning_rate))
    return Recipe(rate, section.batch_size, section.epochs, section.max_steps,
                  section.warmup_fraction, section.weight_decay, section.max_grad_norm,
                  section.seed)


def require_decay_below_one(*learning_rates: float | str, weight_decay: float) -> None:
    """AdamW multiplies every weight by 1 - learning_rate x weight_decay each step: from 1 on
    the weights flip sign and grow until they are not finite. `auto`: its largest rate."""
    rate = max(max(rate for _, rate in AUTO_LEARNING_RATES) if rate == "auto" else float(rate)
               for rate in learning_rates)
    if rate * weight_decay >= 1:
        raise ConfigError("weight_decay", f"{yaml_text(weight_decay)} is not allowed with a "
                          f"learning rate of {rate:g}: AdamW multiplies every weight by 1 - "
                          "learning_rate x weight_decay each step, which must stay above 0; "
                          f"lower weight_decay below {1 / rate:g} (BERT's: 0.01)")


@dataclass(frozen=True)
class Recipe:
    """How one model is fine-tuned (bertcore.downstream.finetune.train_classifier)."""

    learning_rate: float
    batch_size: int
    epochs: float
    max_steps: int | None  # cap on the optimizer steps (a CPU); None: no cap
    warmup_fraction: float
    weight_decay: float
    max_grad_norm: float
    seed: int  # classifier init, data order, dropout

    def total_steps(self, train_examples: int) -> int:
        steps = math.ceil(self.epochs * math.ceil(train_examples / self.batch_size))
        return min(steps, self.max_steps) if self.max_steps else steps


# The module of a fine-tune's job (`finetune.fine_tune_job`), which the workers' server imports:
# named here, so that the stage starts the server before it imports the module.
FINETUNE_JOB_MODULE = "bertcore.downstream.finetune"


@dataclass
class FinetuneKeys:
    """The `finetune:` section's own keys: its task."""

    # a built-in task, or a .jsonl / .csv / .tsv file
    data: checked(str, lambda data: bool(data.strip()) and (not data.startswith("builtin:")
                                                            or data in BUILTIN_TASKS),
                  f"one of {', '.join(BUILTIN_TASKS)}, or a .jsonl/.csv/.tsv file"
                  ) = "builtin:same-document"
    test_data: str | None = None  # null: a seeded split of `data` by test_fraction
    test_fraction: number(gt=0, lt=1) = 0.2
    text_field: text(min_length=1, allowed="a field name") = "text"
    text_pair_field: str | None = None  # a second text: sentence-pair classification
    label_field: text(min_length=1, allowed="a field name") = "label"
    # regression: numeric labels, STS-B's head and loss, Pearson and Spearman; auto: regression
    # when every label is a number and one is not whole (bertcore.downstream.tasks.task_problem)
    task: Literal["classification", "regression", "auto"] = "auto"


@params_section
class FinetuneConfig(RecipeSection, FinetuneKeys):
    """The `finetune:` section of params.yaml: its task's keys, then the recipe's."""

    batch_size: BatchSize = 16
    epochs: Epochs = 5.0
    max_steps: MaxSteps = 1000  # a CPU's
    # every seed on the one test split of `seed`: the median, its interval over seeds and
    # items, the spread (params.yaml: why this count)
    seeds: SeedCount = 3

    @model_validator(mode="after")
    def _builtin_tasks_have_classes(self) -> FinetuneConfig:
        require(self.task != "regression" or self.data not in BUILTIN_TASKS, "task", self.task,
                f"classification or auto: {self.data} is a built-in task of classes")
        return self

    def recipes(self, hidden_size: int) -> list[Recipe]:
        """One recipe per seed (seed, seed + 1, ...), the same but for the seed."""
        base = recipe_for(self, hidden_size)
        return [replace(base, seed=self.seed + i) for i in range(self.seeds)]


@params_section
class PruneConfig:
    """The `prune:` section of params.yaml."""

    # share of all heads to remove (a layer always keeps one)
    fraction: number(ge=0, lt=1, allowed="a share of the heads in [0, 1)") = 0.5
    batches: integer(ge=1) = 32  # pretraining batches the importance is averaged over
    batch_size: integer(ge=1) = 32
    iterative: Bool = False  # steps of 10% of the heads, re-scored after each
    recovery_steps: integer(ge=0) = 100  # further pretraining of the pruned model (0: none)
    recovery_learning_rate: number(gt=0) = 1e-4
    # timed steps per round (5 rounds per model, interleaved)
    throughput_steps: integer(ge=1) = 3
    seed: Int = 42
    device: Device = "auto"
