"""What the finetune stage measured: each seed's two fine-tunes on the one test split (the
pretrained encoder's and the scratch control's, `SeedRun`) and, over the seeds, the comparison
with its baselines (`Comparison`), from which `finetune_report` makes the report."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertcore.model.classifier import BertForSequenceClassification


@dataclass
class FinetuneResult:
    model: BertForSequenceClassification | None  # None: not kept (the scratch control's)
    test: dict[str, float]  # scores, or a regression task's correlations
    steps: int
    final_train_loss: float
    seconds: float
    predictions: np.ndarray  # one per test example: a class index, or a regression's value


@dataclass
class SeedRun:
    """Both models fine-tuned with one seed (classifier init, data order, dropout)."""

    seed: int
    pretrained: FinetuneResult
    scratch: FinetuneResult

    def gain(self) -> dict[str, float]:
        """What pretraining bought: pretrained minus scratch, per score."""
        a, b = self.pretrained.test, self.scratch.test
        return {key: a[key] - b[key] for key in a}


@dataclass
class Comparison:
    runs: list[SeedRun]  # one per seed, in seed order; all scored on the one test split
    majority: dict[str, float] | None  # baseline: the most frequent class (None: regression)
    bag_of_words: dict[str, float]  # baseline: a TF-IDF regression (no model, no pretraining)

    @property
    def headline(self) -> str:
        """The score the seeds are ranked by: accuracy, or a regression's Pearson."""
        return "pearson" if "pearson" in self.runs[0].pretrained.test else "accuracy"

    def median_run(self) -> SeedRun:
        """The seed whose pretrained fine-tune has the median headline score (the lower middle
        one for an even count, as GLUE's): its model is the one written."""
        ranked = sorted(self.runs, key=lambda run: (run.pretrained.test[self.headline],
                                                    run.seed))
        return ranked[(len(ranked) - 1) // 2]
