"""95% intervals of the figures the stages report, by the bootstrap over the items they were
measured on and, where a figure comes from several runs (fine-tune seeds, pretraining seeds),
over the runs too (the Multi-Bootstrap of Sellam et al. 2022, MultiBERTs).

A figure is a *statistic* of per-item columns (`STATISTICS`: an accuracy is the mean of 0/1
outcomes, the MLM accuracy the ratio of correct to predicted tokens per sequence, ...). Its
outcomes are held as `Runs`: each column an array [seeds, runs, items], where `seeds` are
pretraining seeds (the outer runs, averaged) and `runs` the runs of one stage on one model
(fine-tune seeds, averaged or their median taken, as the stage reports them).

- one run on its items: scipy's `stats.bootstrap` (BCa, the percentile interval where BCa is
  undefined);
- two runs on the same items: scipy's paired bootstrap of the difference;
- several runs, or two sides on different items: the hand-written bootstrap below, which
  resamples seeds, runs and items together (the same items on both sides when they are the
  same items, and the same seeds when both sides ran the same seeds).

Every resampling is seeded (`SEED`): the same outcomes give the same interval, to the bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 20221  # the resampling's: the same outcomes, the same interval


def _mean(c):
    return c["x"].mean(axis=-1)


def _ratio(c):
    return c["num"].sum(axis=-1) / np.maximum(c["den"].sum(axis=-1), 1e-300)


def _exp_ratio(c):
    return np.exp(np.minimum(_ratio(c), 700.0))


def _macro_f1_of(label, pred, classes):
    scores = []
    for k in classes:
        tp = ((label == k) & (pred == k)).sum(axis=-1)
        predicted, actual = (pred == k).sum(axis=-1), (label == k).sum(axis=-1)
        denominator = predicted + actual
        scores.append(np.where(denominator > 0, 2.0 * tp / np.maximum(denominator, 1), 0.0))
    return np.mean(scores, axis=0)


def _classes(label, pred):
    # scikit-learn's: the classes among the labels or the predictions
    return np.union1d(np.unique(label), np.unique(pred))


def _macro_f1(c):
    return _macro_f1_of(c["label"], c["pred"], _classes(c["label"], c["pred"]))


def _macro_f1_gain(c):
    label, pred, base = c["label"], c["pred"], c["base"]
    return (_macro_f1_of(label, pred, _classes(label, pred))
            - _macro_f1_of(label, base, _classes(label, base)))


def _binary_f1(c):
    return _macro_f1_of(c["label"], c["pred"], [1])


def _mcc(c):
    label, pred = c["label"] == 1, c["pred"] == 1
    tp, tn = (label & pred).sum(axis=-1), (~label & ~pred).sum(axis=-1)
    fp, fn = (~label & pred).sum(axis=-1), (label & ~pred).sum(axis=-1)
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn) * 1.0)
    return np.where(denominator > 0, (tp * tn - fp * fn) / np.maximum(denominator, 1e-300), 0.0)


def _pearson_of(x, y):
    x = x - x.mean(axis=-1, keepdims=True)
    y = y - y.mean(axis=-1, keepdims=True)
    denominator = np.sqrt((x * x).sum(axis=-1) * (y * y).sum(axis=-1))
    return np.where(denominator > 0, (x * y).sum(axis=-1) / np.maximum(denominator, 1e-300), 0.0)


def _pearson(c):
    return _pearson_of(c["label"].astype(float), c["pred"].astype(float))


def _ranks(x):
    # average ranks along the last axis (ties share their mean rank), as scipy's spearmanr
    order = np.argsort(x, axis=-1, kind="stable")
    ranks = np.empty_like(order, dtype=float)
    np.put_along_axis(ranks, order, np.arange(x.shape[-1], dtype=float), axis=-1)
    flat_x, flat_r = x.reshape(-1, x.shape[-1]), ranks.reshape(-1, x.shape[-1])
    for row_x, row_r in zip(flat_x, flat_r, strict=True):
        _, inverse, counts = np.unique(row_x, return_inverse=True, return_counts=True)
        if len(counts) < len(row_x):  # ties: each gets its group's mean rank
            sums = np.bincount(inverse, weights=row_r)
            row_r[:] = (sums / counts)[inverse]
    return flat_r.reshape(ranks.shape)


def _spearman(c):
    return _pearson_of(_ranks(c["label"].astype(float)), _ranks(c["pred"].astype(float)))


def _pearson_gain(c):
    return _pearson(c) - _pearson({"label": c["label"], "pred": c["base"]})


def _spearman_gain(c):
    return _spearman(c) - _spearman({"label": c["label"], "pred": c["base"]})


# name -> (the columns it reads, the statistic of columns [..., items] -> [...])
STATISTICS: dict[str, tuple[tuple[str, ...], Callable[[Mapping[str, np.ndarray]], np.ndarray]]]
STATISTICS = {
    "mean": (("x",), _mean),  # an accuracy (0/1 per item), a mean loss, a gain per item
    "ratio": (("num", "den"), _ratio),  # MLM accuracy and loss: per sequence, sum / count
    "exp_ratio": (("num", "den"), _exp_ratio),  # perplexity: exp(loss sum / count)
    "macro_f1": (("label", "pred"), _macro_f1),
    "macro_f1_gain": (("label", "pred", "base"), _macro_f1_gain),  # pred's F1 minus base's
    "f1": (("label", "pred"), _binary_f1),  # of class 1 (GLUE's MRPC, QQP)
    "mcc": (("label", "pred"), _mcc),  # Matthews (GLUE's CoLA)
    "pearson": (("label", "pred"), _pearson),
    "spearman": (("label", "pred"), _spearman),
    "pearson_gain": (("label", "pred", "base"), _pearson_gain),  # pred's r minus base's
    "spearman_gain": (("label", "pred", "base"), _spearman_gain),
}
AGGREGATES = {"mean": np.mean, "median": np.median}


def statistic_of(name: str, columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """`name`'s statistic of `columns` (each [..., items]), reduced over the items."""
    return STATISTICS[name][1](columns)


@dataclass(frozen=True)
class Estimate:
    """A figure with its 95% interval (`low`, `high`)."""

    value: float
    low: float
    high: float

    @property
    def decimals(self) -> int:
        """The decimals the interval supports: two significant digits of its half-width."""
        half = (self.high - self.low) / 2
        if not math.isfinite(half) or half <= 0:
            return 4
        return min(6, max(0, 1 - math.floor(math.log10(half))))

    def rounded(self) -> Estimate:
        d = self.decimals
        return Estimate(round(self.value, d), round(self.low, d), round(self.high, d))

    def interval(self) -> list[float]:
        """[low, high] to the precision they support (what the metrics files hold)."""
        rounded = self.rounded()
        return [rounded.low, rounded.high]

    def text(self, signed: bool = False) -> str:
        """`0.261 [0.255, 0.267]`, to the precision the interval supports."""
        d, sign = self.decimals, "+" if signed else ""
        return f"{self.value:{sign}.{d}f} [{self.low:{sign}.{d}f}, {self.high:{sign}.{d}f}]"

    def scaled(self, factor: float) -> Estimate:
        """The same figure in other units (GLUE's x100)."""
        return Estimate(self.value * factor, self.low * factor, self.high * factor)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True)
class Runs:
    """One statistic's per-item outcomes of one or more runs on the same items: each column an
    array [seeds, runs, items] (pretraining seeds, runs of the stage on one model); `over_runs`
    is how the stage combines its runs (GLUE and finetune: the median over their seeds)."""

    statistic: str
    columns: Mapping[str, np.ndarray]
    over_runs: str = "mean"

    @classmethod
    def of_one(cls, statistic: str, over_runs: str = "mean", **columns) -> Runs:
        """One model's runs: each column [runs, items] or, for one run, [items]."""
        arrays = {k: np.asarray(v) for k, v in columns.items()}
        return cls(statistic, {k: v.reshape((1, -1, v.shape[-1])) for k, v in arrays.items()},
                   over_runs)

    @classmethod
    def of_seeds(cls, sides: list[Runs]) -> Runs:
        """The same figure of several pretraining seeds (each a `Runs` of one seed) as one."""
        first = sides[0]
        return cls(first.statistic, {k: np.concatenate([s.columns[k] for s in sides])
                                     for k in first.columns}, first.over_runs)

    @property
    def shape(self) -> tuple[int, int, int]:
        return next(iter(self.columns.values())).shape

    def value(self) -> float:
        """The figure: the statistic of each run, combined over runs, averaged over seeds."""
        per_run = statistic_of(self.statistic, self.columns)  # [seeds, runs]
        return float(np.mean(AGGREGATES[self.over_runs](per_run, axis=1)))

    def replicates(self, draws: Draws) -> np.ndarray:
        """The figure on each of `draws`' resamples -> [resamples]."""
        n_seeds, n_runs, _ = self.shape
        table = np.empty((n_seeds, n_runs, len(draws.items)))
        for s in range(n_seeds):
            for r in range(n_runs):
                for chunk in range(0, len(draws.items), CHUNK):
                    rows = draws.items[chunk:chunk + CHUNK]
                    table[s, r, chunk:chunk + CHUNK] = statistic_of(
                        self.statistic, {k: v[s, r][rows] for k, v in self.columns.items()})
        resample = np.arange(len(draws.items))[:, None, None]
        picked = table[draws.seeds[:, :, None], draws.runs[:, None, :], resample]
        return np.mean(AGGREGATES[self.over_runs](picked, axis=2), axis=1)


CHUNK = 250  # resamples scored at once: [CHUNK, items] per column in memory


@dataclass(frozen=True)
class Draws:
    """Indices drawn with replacement, one row per resample: items [B, items], seeds
    [B, seeds], runs [B, runs]."""

    items: np.ndarray
    seeds: np.ndarray
    runs: np.ndarray

    @classmethod
    def of(cls, shape: tuple[int, int, int], rng: np.random.Generator) -> Draws:
        n_seeds, n_runs, n_items = shape
        return cls(*(rng.integers(0, n, (RESAMPLES, n)) for n in (n_items, n_seeds, n_runs)))


def _percentile(replicates: np.ndarray, value: float) -> Estimate:
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return Estimate(value, float(min(low, value)), float(max(high, value)))


def _scipy_interval(data: tuple[np.ndarray, ...], statistic, value: float) -> Estimate:
    """scipy's paired bootstrap (BCa; the percentile interval where BCa is undefined, as
    with every item scored the same), CHUNK resamples (and jackknife samples) at a time: the
    same draws as all at once, but [CHUNK, items] in memory, not BCa's [items, items]
    (BLiMP's 67,000 pairs: 36 GB at once)."""
    import warnings

    from scipy import stats

    if all(np.all(column == column[0]) for column in data):
        return Estimate(value, value, value)  # nothing varies: no interval to draw
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():  # BCa undefined: said by the NaN, tried again below
            warnings.simplefilter("ignore")
            result = stats.bootstrap(data, statistic, n_resamples=RESAMPLES, paired=True,
                                     vectorized=True, method=method, axis=-1,
                                     confidence_level=CONFIDENCE, batch=CHUNK,
                                     rng=np.random.default_rng(SEED))
        low, high = result.confidence_interval
        if math.isfinite(low) and math.isfinite(high):
            return Estimate(value, float(min(low, value)), float(max(high, value)))
    return Estimate(value, value, value)


def _single(runs: Runs) -> bool:
    return runs.shape[:2] == (1, 1)


def estimate(runs: Runs) -> Estimate:
    """The figure of `runs` with its 95% interval over their items (and seeds and runs)."""
    value = runs.value()
    if runs.shape[2] == 0:
        return Estimate(value, math.nan, math.nan)
    if _single(runs):
        names = list(runs.columns)

        def statistic(*columns, axis=-1):
            return statistic_of(runs.statistic, dict(zip(names, columns, strict=True)))

        return _scipy_interval(tuple(runs.columns[k][0, 0] for k in names), statistic, value)
    return _percentile(runs.replicates(Draws.of(runs.shape, np.random.default_rng(SEED))),
                       value)


def difference(a: Runs, b: Runs, *, same_items: bool, same_seeds: bool = False) -> Estimate:
    """b's figure minus a's, with its 95% interval. `same_items`: both were scored on the same
    items (item i of one is item i of the other), which are then resampled together (paired);
    else each side's items are resampled on their own. `same_seeds`: both sides ran the same
    pretraining seeds (and stage runs), resampled together too (MultiBERTs' paired design)."""
    value = b.value() - a.value()
    if same_items and _single(a) and _single(b):
        names = list(a.columns)
        n = len(names)

        def statistic(*columns, axis=-1):
            return (statistic_of(b.statistic, dict(zip(names, columns[n:], strict=True)))
                    - statistic_of(a.statistic, dict(zip(names, columns[:n], strict=True))))

        data = tuple(a.columns[k][0, 0] for k in names) + tuple(b.columns[k][0, 0] for k in names)
        return _scipy_interval(data, statistic, value)
    rng = np.random.default_rng(SEED)
    draws_a = Draws.of(a.shape, rng)
    own = Draws.of(b.shape, rng)
    draws_b = Draws(draws_a.items if same_items else own.items,
                    draws_a.seeds if same_seeds and a.shape[0] == b.shape[0] else own.seeds,
                    draws_a.runs if same_seeds and a.shape[1] == b.shape[1] else own.runs)
    return _percentile(b.replicates(draws_b) - a.replicates(draws_a), value)


def verdict(diff: Estimate, higher_is_better: bool = True) -> str:
    """"B better", "B worse" or "within noise": whether the interval of B - A excludes 0."""
    if not (math.isfinite(diff.low) and math.isfinite(diff.high)):
        return "within noise"
    if diff.low > 0 or diff.high < 0:
        return "B better" if (diff.low > 0) == higher_is_better else "B worse"
    return "within noise"
