"""The frequency plateau judged by the built-in probes (bertcore.training.evaluation.plateau)."""

from __future__ import annotations

import pytest
from scipy.stats import binomtest

from bertcore.training.evaluation.plateau import plateau_notice, wilson_interval

OFF = {"cloze_p_at_1": 0.30, "cloze_frequency_p_at_1": 0.05, "swapped_pairs": 0.92,
       "swapped_pairs_n": 97}


@pytest.mark.parametrize(("hits", "n"), [(50, 100), (61, 97), (3, 10), (97, 97)])
def test_the_wilson_interval_is_scipys(hits, n):
    expected = binomtest(hits, n).proportion_ci(method="wilson")
    assert wilson_interval(hits / n, n) == pytest.approx((expected.low, expected.high), abs=1e-6)


def test_a_model_off_the_plateau_gets_no_notice():
    assert plateau_notice(OFF, 1500) is None
    # figures that are missing (no probes, no pair) judge nothing
    assert plateau_notice({}, 1500) is None
    assert plateau_notice({**OFF, "swapped_pairs": None, "swapped_pairs_n": 0}, 10) is None


def test_cloze_no_better_than_word_frequency_is_the_plateau():
    notice = plateau_notice({**OFF, "cloze_p_at_1": 0.05}, 1500)
    assert notice.startswith("the model ends on the frequency plateau at step 1500: its cloze "
                             "P@1 0.050 is no better than the word-frequency guess's 0.050; try ")
    assert "train.schedule: wsd" in notice and "swapped" not in notice


def test_swapped_pairs_at_chance_are_the_plateau_and_just_above_it_not():
    # 0.59 of 97: the Wilson interval [0.491, 0.683] holds 0.5; 0.61 of 97 ([0.511, 0.700]) not
    notice = plateau_notice({**OFF, "swapped_pairs": 0.59}, 750)
    assert "its swapped pairs 0.590 [0.491, 0.683] are at chance (0.5)" in notice
    assert "cloze" not in notice
    assert plateau_notice({**OFF, "swapped_pairs": 0.61}, 750) is None
    both = plateau_notice({**OFF, "swapped_pairs": 0.5, "cloze_p_at_1": 0.01}, 750)
    assert "guess's 0.050 and its swapped pairs 0.500" in both
