"""A verdict against a goal, latency or fidelity, from confidence bounds: a claim is made only
when the bound says so, and a bound that does not exist (too few requests) decides nothing."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class Verdict(StrEnum):
    """pass: the bound is inside the limit; fail: outside; unresolved: it straddles the limit,
    or the bound needed does not exist. A str, so tables and JSON see the word."""

    PASS = "pass"
    FAIL = "fail"
    UNRESOLVED = "unresolved"


def percentile_verdict(lo: float | None, hi: float | None, limit: float) -> Verdict:
    """`figure pP <= limit`: pass if the upper bound is <= limit, fail if the lower bound is
    > limit. A sample sitting exactly at the limit has lo < limit <= hi: unresolved."""
    if hi is not None and hi <= limit:
        return Verdict.PASS
    if lo is not None and lo > limit:
        return Verdict.FAIL
    return Verdict.UNRESOLVED


def attainment_verdict(lo: float, hi: float, target: float) -> Verdict:
    """`fraction of good requests >= target`: pass if the lower bound reaches the target, fail
    if the upper bound falls short of it."""
    if lo >= target:
        return Verdict.PASS
    if hi < target:
        return Verdict.FAIL
    return Verdict.UNRESOLVED


def combined(verdicts: Iterable[Verdict]) -> Verdict:
    """A point meets its goal when every part does: fail if any part fails, pass if all pass."""
    found = set(verdicts)
    if Verdict.FAIL in found:
        return Verdict.FAIL
    if found <= {Verdict.PASS}:
        return Verdict.PASS
    return Verdict.UNRESOLVED
