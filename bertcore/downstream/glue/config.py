"""The `glue:` section of params.yaml (`GlueConfig`): its own keys, GLUE's tasks among them,
then the keys of a section that fine-tunes (`downstream/config.py`'s `RecipeSection`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bertcore.common.validation import Bool, checked, integer, params_section, text
from bertcore.downstream.config import (
    BatchSize,
    Epochs,
    MaxSteps,
    Recipe,
    RecipeSection,
    SeedCount,
    recipe_for,
)
from bertcore.downstream.glue.tasks import GLUE_TASKS

# Turc et al. (2019), "Well-Read Students Learn Better", the miniatures' fine-tuning grid:
# 4 epochs, every pair of these, the best on dev.
GRID_LEARNING_RATES = (3e-4, 1e-4, 5e-5, 3e-5)
GRID_BATCH_SIZES = (8, 16, 32, 64, 128)
GRID_EPOCHS = 4.0

GLUE_DATA_HF = "hf:glue"
# The module of a fine-tune's job (`fine_tunes.fine_tune_job`), which the workers' server
# imports: named here, so that the stage starts the server before it imports the suite.
GLUE_JOB_MODULE = "bertcore.downstream.glue.fine_tunes"


@dataclass
class GlueKeys:
    """The `glue:` section's own keys: the data, its tasks, the model, the grid."""

    # null: no GLUE data (the stage says so); a folder in GLUE's layout; or hf:glue
    data: text(min_length=1, allowed="null, a folder in GLUE's layout or hf:glue") | None = None
    # task keys (cola sst2 mrpc stsb qqp mnli qnli rte wnli); null: every task the folder has
    tasks: checked(list[str], lambda keys: bool(keys) and set(keys) <= set(GLUE_TASKS),
                   f"null or a list of {', '.join(GLUE_TASKS)}") | None = None
    model: str | None = None  # a Hugging Face BERT folder; null: the pipeline's pretrained model
    grid: Bool = False  # Turc et al.'s grid (learning rates x batch sizes, 4 epochs): best on dev
    # a seeded subset of each train file, for a CPU (QQP and MNLI have ~400k); null: all
    max_train_examples: integer(ge=1, allowed="null or an integer >= 1") | None = None


@params_section
class GlueConfig(RecipeSection, GlueKeys):
    """The `glue:` section of params.yaml: its own keys, then the recipe's."""

    batch_size: BatchSize = 32
    epochs: Epochs = 4.0
    max_steps: MaxSteps = None
    seeds: SeedCount = 5  # fine-tunes per task: median, min, max

    def learning_rates(self) -> tuple[float | str, ...]:
        """The grid's, or the one."""
        return GRID_LEARNING_RATES if self.grid else (self.learning_rate,)

    def recipes(self, hidden_size: int) -> list[Recipe]:
        """The recipes to try on a task, each to be run with every seed: one, or the grid's."""
        base = recipe_for(self, hidden_size)
        if not self.grid:
            return [base]
        return [replace(base, learning_rate=lr, batch_size=bs, epochs=GRID_EPOCHS)
                for lr in GRID_LEARNING_RATES for bs in GRID_BATCH_SIZES]
