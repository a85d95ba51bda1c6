"""Fidelity goals (workflow_scripts.fidelity.goals): a goal read from the config's shape (one
that means nothing is the schema's to refuse: tests/config/test_schema.py), each objective
pass / fail / unresolved from its figure's interval or `not measured`, the overall verdict,
agreement as a share of the floor with its Wilson bounds, and the card's text. The figures
are hand-made stand-ins for what llama-perplexity and the greedy comparison give."""

from __future__ import annotations

import pytest

from workflow_scripts.fidelity.agreement import Agreement
from workflow_scripts.fidelity.goals import (
    NOT_MEASURED,
    FidelityFigures,
    FidelityGoal,
    Figure,
    agreement_of_floor,
    judge,
)
from workflow_scripts.verdicts.verdict import Verdict

Z = 1.959963984540054


def goal(**objectives: dict) -> FidelityGoal:
    return FidelityGoal.from_dict(objectives)


# --- reading a goal -----------------------------------------------------------------------------


def test_a_goal_reads_in_a_fixed_order_and_round_trips():
    data = {
        "agreement_of_floor_pct": {"min": 99},
        "kld_mean": {"max": 0.05},
        "same_top_pct": {"min": 90},
        "kld_p99": {"max": 1},
    }
    read = FidelityGoal.from_dict(data)
    assert [o.figure for o in read.objectives] == [
        "kld_mean",
        "kld_p99",
        "same_top_pct",
        "agreement_of_floor_pct",
    ]
    assert read.to_dict() == data and FidelityGoal.from_dict(read.to_dict()) == read
    assert read.text == "KL mean ≤ 0.05, KL p99 ≤ 1, same top % ≥ 90, agreement % of floor ≥ 99"


# --- figures and their intervals -------------------------------------------------------------


def test_a_standard_error_gives_a_1_96_interval_and_none_gives_none():
    kl = Figure.from_standard_error(0.012, 0.002)
    assert (kl.lo, kl.hi) == pytest.approx((0.012 - Z * 0.002, 0.012 + Z * 0.002))
    assert Figure.from_standard_error(0.5, None) == Figure.exact(0.5) == Figure(0.5, 0.5, 0.5)
    assert kl.text == "0.012 ± 0.0039"
    assert Figure.exact(0.25).text == "0.25"
    assert Figure(93.75, 71.7, 98.9).text == "93.8 [71.7, 98.9]"


def test_agreement_of_the_floor_scales_the_wilson_bounds_by_the_floor():
    pair, floor = Agreement(16, 12, (1, 2, 3, 4)), Agreement(16, 15, (5,))
    got = agreement_of_floor(pair, floor)
    lo, hi = pair.interval_pct
    scale = 100 / (100 * 15 / 16)
    assert (got.value, got.lo, got.hi) == pytest.approx((75 * scale, lo * scale, hi * scale))
    assert got.value == pytest.approx(80.0)


def test_agreement_of_the_floor_and_its_interval_are_capped_at_100_percent():
    """A pair that agreed more often than the floor (16/16 against 13/16: noise) reads 100 %,
    not 123 %; its Wilson bounds scaled by 16/13 are capped the same way. Before, the figure and
    its upper bound passed 100 %."""
    pair, floor = Agreement(16, 16), Agreement(16, 13, (1, 2, 3))
    lo, hi = pair.interval_pct
    scale = 16 / 13
    assert lo * scale < 100 < hi * scale  # uncapped: the interval would pass 100 %
    got = agreement_of_floor(pair, floor)
    assert (got.value, got.lo, got.hi) == pytest.approx((100.0, lo * scale, 100.0))
    below = agreement_of_floor(Agreement(16, 8, (1,) * 8), floor)  # 50 % of 81.25 %: uncapped
    assert below.value == pytest.approx(100 * 8 / 13)


def test_agreement_without_a_floor_is_against_100_percent_and_none_without_a_ratio():
    pair = Agreement(16, 12, (1, 2, 3, 4))
    assert agreement_of_floor(pair, None) == Figure(75.0, *pair.interval_pct)
    assert agreement_of_floor(pair, Agreement(0, 0)) == agreement_of_floor(pair, None)
    assert agreement_of_floor(pair, Agreement(16, 0, (0,) * 16)) is None  # floor never agreed
    assert agreement_of_floor(Agreement(0, 0, recorded=False), None) is None


def test_measured_figures_from_the_tools_values():
    figures = FidelityFigures.measured(
        kld_mean=0.01, kld_mean_err=0.001, kld_p99=0.2, same_top_pct=95.0, same_top_err_pct=0.5
    )
    assert figures.kld_mean == Figure.from_standard_error(0.01, 0.001)
    assert figures.kld_p99 == Figure.exact(0.2)
    assert figures.same_top_pct == Figure.from_standard_error(95.0, 0.5)
    assert figures.agreement_of_floor_pct is None
    pair, floor = Agreement(16, 16), Agreement(16, 16)
    assert FidelityFigures.measured(agreement=pair, floor=floor).agreement_of_floor_pct == (
        agreement_of_floor(pair, floor)
    )
    assert FidelityFigures.measured() == FidelityFigures()


# --- verdicts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("objective", "figure", "expected"),
    [
        ({"kld_mean": {"max": 0.05}}, Figure.from_standard_error(0.012, 0.002), Verdict.PASS),
        ({"kld_mean": {"max": 0.05}}, Figure.from_standard_error(0.09, 0.002), Verdict.FAIL),
        ({"kld_mean": {"max": 0.05}}, Figure.from_standard_error(0.049, 0.002), Verdict.UNRESOLVED),
        ({"kld_mean": {"max": 0.05}}, Figure.exact(0.05), Verdict.PASS),  # at the bound: within
        ({"kld_p99": {"max": 0.5}}, Figure.exact(0.4), Verdict.PASS),
        ({"kld_p99": {"max": 0.5}}, Figure.exact(0.6), Verdict.FAIL),
        ({"same_top_pct": {"min": 90}}, Figure.from_standard_error(95, 1), Verdict.PASS),
        ({"same_top_pct": {"min": 90}}, Figure.from_standard_error(85, 1), Verdict.FAIL),
        ({"same_top_pct": {"min": 90}}, Figure.from_standard_error(90.5, 1), Verdict.UNRESOLVED),
        ({"agreement_of_floor_pct": {"min": 50}}, Figure(80, 60, 95), Verdict.PASS),
        ({"agreement_of_floor_pct": {"min": 99}}, Figure(50, 30, 70), Verdict.FAIL),
        ({"agreement_of_floor_pct": {"min": 99}}, Figure(100, 80, 100), Verdict.UNRESOLVED),
        ({"kld_mean": {"max": 0.05}}, None, None),  # not measured
    ],
)
def test_each_objective_from_its_interval(objective, figure, expected):
    (name,) = objective
    got = judge(goal(**objective), FidelityFigures(**{name: figure}))
    (one,) = got.objectives
    assert one.verdict == expected and one.figure == figure
    assert one.word == (NOT_MEASURED if expected is None else expected.value)
    assert got.verdict == (Verdict.UNRESOLVED if expected is None else expected)


def test_the_card_text_per_objective():
    target = goal(kld_mean={"max": 0.05}, kld_p99={"max": 1}, same_top_pct={"min": 90})
    figures = FidelityFigures.measured(kld_mean=0.012, kld_mean_err=0.002, kld_p99=0.3)
    assert judge(target, figures).texts == (
        "KL mean 0.012 ± 0.0039 ≤ 0.05: pass",
        "KL p99 0.3 ≤ 1: pass",
        "same top %: not measured",
    )


ALL = {
    "kld_mean": {"max": 0.05},
    "same_top_pct": {"min": 90},
    "agreement_of_floor_pct": {"min": 90},
}
KL_PASS = Figure.from_standard_error(0.01, 0.001)
KL_FAIL = Figure.from_standard_error(0.2, 0.001)
TOP_PASS = Figure.from_standard_error(97, 0.5)
TOP_UNRESOLVED = Figure.from_standard_error(90, 0.5)


@pytest.mark.parametrize(
    ("figures", "expected"),
    [
        (FidelityFigures(kld_mean=KL_PASS, same_top_pct=TOP_PASS), Verdict.PASS),  # all measured
        (FidelityFigures(kld_mean=KL_FAIL, same_top_pct=TOP_UNRESOLVED), Verdict.FAIL),
        (FidelityFigures(kld_mean=KL_PASS, same_top_pct=TOP_UNRESOLVED), Verdict.UNRESOLVED),
        (FidelityFigures(), Verdict.UNRESOLVED),  # nothing measured
    ],
)
def test_the_overall_verdict(figures, expected):
    got = judge(FidelityGoal.from_dict(ALL), figures)
    assert got.verdict == expected
    assert [o.word for o in got.objectives][2] == NOT_MEASURED
