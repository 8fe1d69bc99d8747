"""The intervals against known answers: a model against itself, a planted shift of known size,
paired against unpaired on correlated items, scipy's bootstrap where both apply, the seeds'
spread, and the precision a figure is printed to."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bertcore.common.intervals import (
    RESAMPLES,
    SEED,
    Estimate,
    Runs,
    difference,
    estimate,
    verdict,
)


def outcomes(n: int, p: float, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < p).astype(np.int64)


def flipped_right(x: np.ndarray, k: int) -> np.ndarray:
    """`x` with its first `k` wrong items made right."""
    y = x.copy()
    y[np.flatnonzero(y == 0)[:k]] = 1
    return y


def test_a_model_against_itself_differs_by_nothing_within_noise():
    a = Runs.of_one("mean", x=outcomes(1000, 0.6, 1))
    diff = difference(a, a, same_items=True)
    assert (diff.value, diff.low, diff.high) == (0.0, 0.0, 0.0)
    assert verdict(diff) == "within noise"
    seeds = Runs("mean", {"x": np.stack([outcomes(500, 0.6, s) for s in range(3)])[:, None]})
    diff = difference(seeds, seeds, same_items=True, same_seeds=True)
    assert diff.value == 0.0 and diff.low <= 0.0 <= diff.high
    assert verdict(diff) == "within noise"


@pytest.mark.parametrize("k", [40, 80])
def test_a_planted_shift_is_found_at_its_size(k):
    x = outcomes(1000, 0.6, 2)
    a, b = Runs.of_one("mean", x=x), Runs.of_one("mean", x=flipped_right(x, k))
    diff = difference(a, b, same_items=True)
    assert diff.value == pytest.approx(k / 1000)
    assert diff.contains(k / 1000) and diff.low > 0
    assert verdict(diff) == "B better"
    assert verdict(difference(b, a, same_items=True)) == "B worse"
    # lower is better (a loss): the same shift is worse
    assert verdict(diff, higher_is_better=False) == "B worse"


def test_pairing_narrows_the_interval_on_correlated_items():
    x = outcomes(1000, 0.6, 3)
    a, b = Runs.of_one("mean", x=x), Runs.of_one("mean", x=flipped_right(x, 30))
    paired = difference(a, b, same_items=True)
    unpaired = difference(a, b, same_items=False)
    assert paired.value == pytest.approx(unpaired.value)
    assert (paired.high - paired.low) < 0.5 * (unpaired.high - unpaired.low)
    assert verdict(paired) == "B better" and verdict(unpaired) == "within noise"


def test_one_run_is_scipys_bca_interval():
    x = outcomes(800, 0.3, 4)
    ours = estimate(Runs.of_one("mean", x=x))
    theirs = stats.bootstrap((x,), np.mean, n_resamples=RESAMPLES, method="BCa",
                             rng=np.random.default_rng(SEED)).confidence_interval
    assert (ours.low, ours.high) == pytest.approx((theirs.low, theirs.high))
    assert ours.value == pytest.approx(x.mean())


def test_a_ratio_resamples_its_items_whole():
    """MLM accuracy over sequences: correct and predicted tokens are resampled together."""
    rng = np.random.default_rng(5)
    den = rng.integers(10, 40, 600)
    num = rng.binomial(den, 0.3)
    ours = estimate(Runs.of_one("ratio", num=num, den=den))
    theirs = stats.bootstrap((num, den), lambda n, d, axis=-1: n.sum(axis) / d.sum(axis),
                             paired=True, vectorized=True, n_resamples=RESAMPLES, method="BCa",
                             rng=np.random.default_rng(SEED)).confidence_interval
    assert ours.value == pytest.approx(num.sum() / den.sum())
    assert (ours.low, ours.high) == pytest.approx((theirs.low, theirs.high))


def test_the_multi_bootstrap_of_one_seed_is_close_to_scipys_percentile_interval():
    x, y = outcomes(1500, 0.5, 6), outcomes(1500, 0.55, 7)
    a = Runs("mean", {"x": x[None, None]})
    b = Runs("mean", {"x": y[None, None]})
    # one seed each, but through the hand-written path (unpaired items)
    ours = difference(a, b, same_items=False)
    theirs = stats.bootstrap((x, y), lambda u, v, axis=-1: v.mean(axis) - u.mean(axis),
                             n_resamples=RESAMPLES, method="percentile", vectorized=True,
                             rng=np.random.default_rng(SEED)).confidence_interval
    assert ours.low == pytest.approx(theirs.low, abs=0.006)
    assert ours.high == pytest.approx(theirs.high, abs=0.006)


def test_seeds_that_disagree_widen_the_interval():
    """Three pretraining seeds whose accuracies differ by 0.1: their interval is wider than
    one seed's over the same number of items, and holds the seeds' mean."""
    seeds = np.stack([outcomes(1000, p, 10 + i) for i, p in enumerate((0.5, 0.6, 0.7))])
    three = estimate(Runs("mean", {"x": seeds[:, None]}))
    one = estimate(Runs.of_one("mean", x=seeds[1]))
    assert three.value == pytest.approx(seeds.mean())
    assert (three.high - three.low) > 2 * (one.high - one.low)
    # the mean of three seeds drawn from (0.5, 0.6, 0.7): its 2.5% and 97.5% points are about
    # 0.533 and 0.667, widened a little by the items
    assert three.low < 0.55 and three.high > 0.65


def test_the_median_over_runs_is_the_figure_of_a_stage_with_seeds():
    runs = np.stack([outcomes(400, p, 20 + i) for i, p in enumerate((0.5, 0.7, 0.52))])
    found = estimate(Runs.of_one("mean", over_runs="median", x=runs))
    assert found.value == pytest.approx(np.median(runs.mean(axis=1)))
    assert found.low < found.value < found.high


def test_classification_statistics_are_scikit_learns():
    from sklearn.metrics import f1_score, matthews_corrcoef

    rng = np.random.default_rng(8)
    label = rng.integers(0, 3, 300)
    # the predictions hold a class the labels lack: scikit-learn counts it (an F1 of 0)
    pred = np.where(rng.random(300) < 0.6, label, rng.integers(0, 4, 300))
    base = rng.integers(0, 3, 300)
    assert estimate(Runs.of_one("macro_f1", label=label, pred=pred)).value == pytest.approx(
        f1_score(label, pred, average="macro"))
    gain = estimate(Runs.of_one("macro_f1_gain", label=label, pred=pred, base=base)).value
    assert gain == pytest.approx(f1_score(label, pred, average="macro")
                                 - f1_score(label, base, average="macro"))
    binary, guess = label % 2, pred % 2
    assert estimate(Runs.of_one("mcc", label=binary, pred=guess)).value == pytest.approx(
        matthews_corrcoef(binary, guess))
    assert estimate(Runs.of_one("f1", label=binary, pred=guess)).value == pytest.approx(
        f1_score(binary, guess))


def test_correlations_are_scipys():
    rng = np.random.default_rng(9)
    label = rng.integers(0, 6, 200).astype(float)  # ties, as STS-B's scores have
    pred = label + rng.normal(0, 2, 200)
    assert estimate(Runs.of_one("pearson", label=label, pred=pred)).value == pytest.approx(
        stats.pearsonr(label, pred).statistic)
    assert estimate(Runs.of_one("spearman", label=label, pred=pred)).value == pytest.approx(
        stats.spearmanr(label, pred).statistic)


def test_the_same_outcomes_give_the_same_interval():
    x = outcomes(500, 0.4, 11)
    seeds = Runs("mean", {"x": np.stack([x, outcomes(500, 0.5, 12)])[:, None]})
    assert estimate(Runs.of_one("mean", x=x)) == estimate(Runs.of_one("mean", x=x))
    assert estimate(seeds) == estimate(seeds)


@pytest.mark.parametrize(("low", "high", "text"), [
    (0.2546, 0.2670, "0.2608 [0.2546, 0.2670]"),  # half-width 0.006: 4 decimals
    (0.23, 0.29, "0.261 [0.230, 0.290]"),  # 0.03: 3
    (0.1, 0.4, "0.26 [0.10, 0.40]"),  # 0.15: 2
    (0.2608, 0.2608, "0.2608 [0.2608, 0.2608]"),  # no spread: 4
])
def test_a_figure_is_printed_to_the_precision_its_interval_supports(low, high, text):
    assert Estimate(0.26075564638683646, low, high).text() == text


def test_every_item_alike_gives_a_point_interval():
    ones = np.ones(300, dtype=np.int64)
    found = estimate(Runs.of_one("mean", x=ones))
    assert (found.value, found.low, found.high) == (1.0, 1.0, 1.0)
