"""How a latency-goal judgement reads in a table cell: an objective's percentile with the bound
that decided it, the attainment with its interval. Its own module: the slo and summary tables and
the cards all print them."""

from __future__ import annotations

from ...slo.point import AttainmentResult, ObjectiveResult
from ...verdicts.verdict import Verdict


def _ms(value: float) -> str:
    return f"{value:.1f}"


def objective_text(result: ObjectiveResult) -> str:
    """`tpot p90 38.0 hi 41.2 ≤ 52 ms`: the measured percentile and the bound that decided (both
    bounds where they straddle the limit; what is missing where a bound cannot exist)."""
    bound, objective = result.bound, result.objective
    head = f"{objective.label} {_ms(bound.value)}" if bound.value is not None else objective.label
    limit = f"{objective.max_ms:g} ms"
    if result.verdict == Verdict.PASS:
        return f"{head} hi {_ms(bound.hi)} ≤ {limit}"
    if result.verdict == Verdict.FAIL:
        return f"{head} lo {_ms(bound.lo)} > {limit}"
    if bound.n == 0:
        return f"{head}: no values"
    if bound.hi is None:
        return f"{head} no upper bound from {bound.n} (needs {bound.needs_for_upper}) vs {limit}"
    lo = _ms(bound.lo) if bound.lo is not None else "none"
    return f"{head} in [{lo}, {_ms(bound.hi)}] ∋ {limit}"


def attainment_text(result: AttainmentResult) -> str:
    """`attainment 0.95 lo 0.91 ≥ 0.9`, as objective_text has it."""
    shown = f"attainment {result.fraction:.2f}" if result.fraction is not None else "attainment"
    target = f"{result.target:g}" if result.target is not None else ""
    if result.verdict == Verdict.PASS:
        return f"{shown} lo {result.lo:.2f} ≥ {target}"
    if result.verdict == Verdict.FAIL:
        return f"{shown} hi {result.hi:.2f} < {target}"
    return f"{shown} in [{result.lo:.2f}, {result.hi:.2f}]" + (f" ∋ {target}" if target else "")
