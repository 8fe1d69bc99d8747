"""What a fine-tune is scored on, the `finetune` stage's and GLUE's alike: accuracy and
macro-F1 of classes (`scores`), Pearson's and Spearman's r of a regression (`correlations`, as
GLUE scores STS-B), each against the golds. Values are plain floats, as fractions (accuracy
0..1, correlations -1..1); a report scales them.

scikit-learn and scipy are imported where a score is computed, not with the module: their
~1.5 s import is then paid by the processes that score (a fine-tune's worker, which its fork
server preloads them for: `workers.FINE_TUNE_IMPORTS`), not by a stage that only plans and
collects fine-tunes."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence

import numpy as np

log = logging.getLogger(__name__)


# Values that span less than this are one value: the prediction files hold 3 decimals, and a
# regression head's outputs that differ only by float noise (1e-7 apart) would otherwise
# correlate with the golds by the noise's chance order, to any score
CONSTANT_SPAN = 1e-3


def scores(predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Accuracy, and macro-F1: the mean over classes of 2TP / (2TP + FP + FN), over the classes
    that occur in the labels or the predictions (scikit-learn's). A regression task's scores
    are STS-B's instead: Pearson's and Spearman's r (`correlations`)."""
    from sklearn.metrics import accuracy_score, f1_score

    return {"accuracy": float(accuracy_score(labels, predictions)),
            "macro_f1": float(f1_score(labels, predictions, average="macro", zero_division=0.0))}


def correlations(predictions: Sequence, golds: Sequence, what: str) -> dict[str, float]:
    """STS-B's metrics of any regression: Pearson's and Spearman's r of the predictions
    against the golds (a constant side counted 0, with a warning naming `what`)."""
    return {"pearson": pearson(predictions, golds, what),
            "spearman": spearman(predictions, golds, what)}


def pearson(predictions: Sequence, golds: Sequence, what: str) -> float:
    """Pearson's r of the predictions against the golds (`correlations`)."""
    from scipy import stats

    return _correlation_of(stats.pearsonr, predictions, golds, what)


def spearman(predictions: Sequence, golds: Sequence, what: str) -> float:
    """Spearman's r of the predictions against the golds (`correlations`)."""
    from scipy import stats

    return _correlation_of(stats.spearmanr, predictions, golds, what)


def _correlation_of(function: Callable, predictions: Sequence, golds: Sequence,
                    what: str) -> float:
    if _span(predictions) < CONSTANT_SPAN or _span(golds) < CONSTANT_SPAN:
        # a constant side: no correlation, as MCC counts it
        log.warning("%s: %s of constant predictions or golds (all within %g) is "
                    "undefined, counted as 0", what, function.__name__, CONSTANT_SPAN)
        return 0.0
    from scipy.stats import NearConstantInputWarning

    with warnings.catch_warnings():  # scipy's own doubts of precision: the span is checked
        warnings.simplefilter("ignore", NearConstantInputWarning)
        return float(function(predictions, golds).statistic)


def _span(values: Sequence) -> float:
    return float(np.max(values) - np.min(values))
