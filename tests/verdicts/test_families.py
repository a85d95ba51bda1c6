"""Verdicts read as a family (workflow_scripts.verdicts.families): Holm's step-down on hand-computed
p-values, and the exact stratified test against Fisher's (one stratum) and against brute force
over every outcome of small strata."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from workflow_scripts.fidelity.agreement import fisher_lower_p
from workflow_scripts.verdicts.families import (
    Stratum,
    family_text,
    holm,
    p_text,
    smallest_stratified_p,
    stratified_lower_p,
    verdict_text,
)


def test_holm_adjusts_in_step_down_order_and_leaves_untested_points_out():
    # m = 4 tested: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 -> 0.06 (monotone)
    adjusted = holm([0.01, 0.04, 0.03, None, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, None, 0.02])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.02]) == [0.02]  # a family of one: its own test
    assert holm([None, None]) == [None, None] and holm([]) == []


def test_the_family_is_named_with_its_size_and_level():
    assert family_text(4) == "Holm over 4 points of the series at 5 %"
    assert family_text(1) == family_text(0) == "alone at 5 %"
    assert p_text(0.0288, 0.1154) == "0.029 (Holm 0.12)"
    assert p_text(0.2, 0.2) == "0.2" and p_text(None, None) == ""
    assert verdict_text("unchanged", 0.144) == "unchanged (p = 0.14)"
    assert verdict_text("unresolved", None) == "unresolved" and verdict_text(None, 0.1) == ""


@pytest.mark.parametrize(
    ("same", "n", "floor_same", "floor_n"),
    [(18, 32, 26, 32), (0, 5, 5, 5), (6, 8, 8, 8), (10, 16, 16, 16), (3, 3, 1, 4), (0, 1, 0, 1)],
)
def test_one_stratum_is_fishers_exact_test(same, n, floor_same, floor_n):
    expected = fisher_lower_p(same, n, floor_same, floor_n)
    assert stratified_lower_p([Stratum(same, n, floor_same, floor_n)]) == pytest.approx(
        expected, abs=1e-15
    )


def brute_force(strata: list[Stratum]) -> float:
    """P(sum of the hypergeometric counts <= the observed sum), over every outcome."""
    laws = []
    for s in strata:
        total, marked = s.trials + s.control_trials, s.successes + s.control_successes
        ways = math.comb(total, s.trials)
        laws.append(
            [
                (x, math.comb(marked, x) * math.comb(total - marked, s.trials - x) / ways)
                for x in range(max(0, marked - s.control_trials), min(s.trials, marked) + 1)
            ]
        )
    observed = sum(s.successes for s in strata)
    return sum(
        math.prod(p for _, p in outcome)
        for outcome in itertools.product(*laws)
        if sum(x for x, _ in outcome) <= observed
    )


def test_the_stratified_p_value_is_the_sum_over_every_outcome():
    rng = random.Random(7)
    for _ in range(300):
        strata = []
        for _ in range(rng.randint(1, 4)):
            n, floor_n = rng.randint(1, 9), rng.randint(1, 9)
            strata.append(Stratum(rng.randint(0, n), n, rng.randint(0, floor_n), floor_n))
        assert stratified_lower_p(strata) == pytest.approx(brute_force(strata), abs=1e-14)


def test_evidence_spread_over_points_adds_up_and_one_point_does_not_decide_alone():
    """22 of 32 identical against a floor of 26 of 32 at each of 4 points: 0.19 at each alone,
    0.015 pooled. The H200's series: 18 of 32 at c8 (0.029 alone) and the floor's own share at
    the other three: 0.14 pooled."""
    spread = [Stratum(22, 32, 26, 32)] * 4
    assert fisher_lower_p(22, 32, 26, 32) == pytest.approx(0.1935, abs=1e-4)
    assert stratified_lower_p(spread) == pytest.approx(0.01545, abs=1e-5)
    one_point = [Stratum(18, 32, 26, 32)] + [Stratum(26, 32, 26, 32)] * 3
    assert fisher_lower_p(18, 32, 26, 32) == pytest.approx(0.02884, abs=1e-5)
    assert stratified_lower_p(one_point) == pytest.approx(0.1443, abs=1e-4)


def test_the_smallest_p_value_says_when_no_outcome_could_be_called_lower():
    assert smallest_stratified_p([Stratum(2, 2, 2, 2)]) == pytest.approx(1 / 6)  # 2 + 2 prompts
    assert smallest_stratified_p([Stratum(2, 2, 2, 2)] * 3) == pytest.approx(1 / 216)
    assert stratified_lower_p([]) == 1.0
    with pytest.raises(ValueError, match="out of range"):
        Stratum(5, 4, 1, 4)
    with pytest.raises(ValueError, match="out of range"):
        Stratum(1, 4, 5, 4)
