"""`bert compare`'s statistics through its library, against answers known beforehand: a side
against itself, a planted shift of known size, pairing that narrows, scipy's own bootstrap,
the seeds' spread, and items that differ."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bertcore.common.errors import BertError
from bertcore.common.intervals import RESAMPLES, SEED
from bertcore.common.outcomes import ItemSet, StageItems, one_run
from bertcore.compare.comparison import compare
from bertcore.compare.sides import make_side
from bertcore.compare.sources import Source

N = 400


def outcomes(x, digest: str = "val-items") -> StageItems:
    """An eval stage of one run: NSP accuracy (0/1 per item) and a loss (lower is better)."""
    x = np.asarray(x)
    return StageItems("eval", {"val": ItemSet(digest, len(x), "val pair")},
                      {"nsp_accuracy": one_run("mean", "val", x=x),
                       "nsp_loss": one_run("mean", "val", False, x=1.0 - x * 0.5)})


def side(label: str, *runs, digest: str = "val-items", seeds=None):
    sources = [Source(f"{label}-{i}", "folder", f"/{label}/{i}", {"eval": outcomes(x, digest)})
               for i, x in enumerate(runs)]
    return make_side(label, sources, list(seeds) if seeds else [None] * len(runs))


def coin(p: float, seed: int, n: int = N) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < p).astype(int)


def flipped_right(x: np.ndarray, k: int) -> np.ndarray:
    """`x` with its first k wrong items made right."""
    y = x.copy()
    y[np.flatnonzero(y == 0)[:k]] = 1
    return y


def row(comparison, name: str = "nsp_accuracy"):
    return next(r for r in comparison.rows if r.name == name)


@pytest.mark.parametrize("seeds", [1, 3])
def test_a_side_against_itself_differs_by_nothing(seeds):
    runs = [coin(0.6, s) for s in range(seeds)]
    a = side("a", *runs, seeds=range(seeds))
    comparison = compare([a, side("b", *runs, seeds=range(seeds))])
    for r in comparison.rows:
        delta = r.deltas[0].estimate
        assert (delta.value, delta.low, delta.high) == (0.0, 0.0, 0.0), r.key
        assert r.deltas[0].verdict == "within noise"
        assert r.cells[0].estimate == r.cells[1].estimate
    assert comparison.notes == ()


def test_a_planted_shift_is_found_at_its_size():
    x, k = coin(0.6, 1), 40
    comparison = compare([side("a", x), side("b", flipped_right(x, k))])
    accuracy, loss = row(comparison), row(comparison, "nsp_loss")
    assert accuracy.deltas[0].estimate.value == pytest.approx(k / N, abs=1e-12)
    assert accuracy.deltas[0].verdict == "B better"
    assert accuracy.deltas[0].estimate.contains(k / N) and accuracy.deltas[0].estimate.low > 0
    assert loss.deltas[0].estimate.value == pytest.approx(-0.5 * k / N, abs=1e-12)
    assert loss.deltas[0].verdict == "B better"  # lower loss: better


def test_pairing_the_same_items_narrows_the_interval():
    x = coin(0.6, 2)
    y = flipped_right(x, 10)  # the same items, nearly the same outcomes: strongly correlated
    paired = row(compare([side("a", x), side("b", y)])).deltas[0]
    unpaired = row(compare([side("a", x), side("b", y, digest="other")])).deltas[0]
    assert paired.paired and not unpaired.paired
    assert paired.estimate.value == unpaired.estimate.value
    width = (paired.estimate.high - paired.estimate.low,
             unpaired.estimate.high - unpaired.estimate.low)
    assert width[0] < width[1] / 2, width
    assert paired.verdict == "B better" and unpaired.verdict == "within noise"


def test_the_paired_interval_is_scipys_paired_bootstrap():
    x, y = coin(0.6, 3), coin(0.65, 4)
    delta = row(compare([side("a", x), side("b", y)])).deltas[0].estimate
    expected = stats.bootstrap((x, y), lambda a, b, axis: b.mean(axis) - a.mean(axis),
                               paired=True, vectorized=True, n_resamples=RESAMPLES,
                               method="BCa", rng=np.random.default_rng(SEED))
    low, high = expected.confidence_interval
    assert (delta.low, delta.high) == pytest.approx((low, high), rel=1e-12)
    assert delta.value == pytest.approx(y.mean() - x.mean(), abs=1e-12)


def test_seeds_that_disagree_widen_the_interval():
    """Three seeds whose accuracies spread by 0.15 against one seed: item noise alone would
    narrow the interval with three times the items; the seeds' spread widens it."""
    a = [coin(p, 10 + i) for i, p in enumerate((0.5, 0.65, 0.8))]
    b = [coin(p, 20 + i) for i, p in enumerate((0.55, 0.7, 0.85))]
    one = row(compare([side("a", a[0]), side("b", b[0])]))
    three = row(compare([side("a", *a, seeds=(1, 2, 3)), side("b", *b, seeds=(4, 5, 6))]))

    def width(estimate):
        return estimate.high - estimate.low

    assert three.cells[0].seeds == 3 and three.cells[0].items == N
    assert width(three.cells[0].estimate) > 2 * width(one.cells[0].estimate)
    assert width(three.deltas[0].estimate) > 1.5 * width(one.deltas[0].estimate)
    assert not three.deltas[0].same_seeds


def test_the_same_seeds_on_both_sides_are_paired():
    a = [coin(p, 30 + i) for i, p in enumerate((0.5, 0.65, 0.8))]
    b = [flipped_right(x, 20) for x in a]
    same = row(compare([side("a", *a, seeds=(1, 2, 3)), side("b", *b, seeds=(1, 2, 3))]))
    other = row(compare([side("a", *a, seeds=(1, 2, 3)), side("b", *b, seeds=(4, 5, 6))]))
    assert same.deltas[0].same_seeds and not other.deltas[0].same_seeds
    assert same.deltas[0].verdict == "B better"
    assert (same.deltas[0].estimate.high - same.deltas[0].estimate.low
            < (other.deltas[0].estimate.high - other.deltas[0].estimate.low) / 2)


def test_other_items_are_said_once_and_compared_unpaired_or_refused():
    x = coin(0.6, 5)
    a, b = side("a", x), side("b", x, digest="another-corpus")
    comparison = compare([a, b])
    assert [len(r.deltas) for r in comparison.rows] == [1, 1]
    assert not any(r.deltas[0].paired for r in comparison.rows)
    assert len(comparison.notes) == 1  # one line for the set, not one per figure
    assert comparison.notes[0].startswith("eval val: b's items differ from a's")
    assert comparison.notes[0].endswith("compared unpaired")
    with pytest.raises(BertError, match="--paired-only compares only the same items"):
        compare([a, b], paired_only=True)


def test_seeds_of_one_side_must_score_the_same_items():
    sources = [Source("s1", "folder", "/s1", {"eval": outcomes(coin(0.6, 6))}),
               Source("s2", "folder", "/s2", {"eval": outcomes(coin(0.6, 7), "other")})]
    with pytest.raises(BertError, match=r"side r: eval\.nsp_accuracy of s2 was scored on other"):
        make_side("r", sources, [1, 2])


def test_more_sides_each_against_the_first():
    x = coin(0.6, 8)
    sides = [side("a", x), side("b", flipped_right(x, 40)), side("c", x),
             side("d", 1 - flipped_right(1 - x, 40))]
    verdicts = [d.verdict for d in row(compare(sides)).deltas]
    assert verdicts == ["B better", "within noise", "B worse"]
