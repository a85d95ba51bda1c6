"""Distribution-free confidence bounds, exact and in stdlib math (no scipy).

A percentile: among n independent draws, the number K below the true p-th percentile is
binomial(n, p/100) whatever the distribution, so order statistics bound it: P(x_(r) <= xi) =
P(K >= r) and P(x_(s) >= xi) = P(K <= s - 1). We pick the ranks from the binomial CDF.

Two-sided: each bound leaves out (1 - confidence) / 2, so [lo, hi] is a `confidence` interval
and each bound alone a one-sided (1 + confidence) / 2 one. A verdict uses one bound for each
claim (pass: hi <= limit; fail: lo > limit), so either claim is wrong with probability at most
(1 - confidence) / 2 = 2.5 % at the default 95 %: the table's interval is the usual two-sided
one, and a verdict errs less often than it. With too few draws a bound does not exist (the
upper bound of a p99 needs n >= 367 at 95 %): it is None and decides nothing.

A fraction (attainment): the Clopper-Pearson interval, the exact binomial one, by bisection.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

from ..loadgen.metrics import percentile as interpolated_percentile

CONFIDENCE = 0.95


def binomial_cdf(k: int, n: int, q: float) -> float:
    """P(K <= k) for K ~ binomial(n, q)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if q <= 0.0 or q >= 1.0:
        return float(q <= 0.0)
    if k < n * q:  # the shorter, and more exact, of the two tails
        return min(1.0, _pmf_sum(n, q, range(k + 1)))
    return max(0.0, 1.0 - _pmf_sum(n, q, range(k + 1, n + 1)))


def _pmf_sum(n: int, q: float, ks: range) -> float:
    log_q, log_not_q, log_choose = math.log(q), math.log1p(-q), _log_choose(n)
    return math.fsum(math.exp(log_choose[k] + k * log_q + (n - k) * log_not_q) for k in ks)


def _pmfs(n: int, q: float) -> list[float]:
    """P(K = k) for k = 0..n, in logs: stable for any n (a term too small for a float is 0,
    not an overflow)."""
    if q <= 0.0 or q >= 1.0:
        return [float(k == (0 if q <= 0.0 else n)) for k in range(n + 1)]
    log_q, log_not_q = math.log(q), math.log1p(-q)
    return [
        math.exp(log_choose + k * log_q + (n - k) * log_not_q)
        for k, log_choose in enumerate(_log_choose(n))
    ]


@lru_cache(maxsize=64)
def _log_choose(n: int) -> tuple[float, ...]:
    """log C(n, k) for k = 0..n, through log-gamma."""
    log_n = math.lgamma(n + 1)
    return tuple(log_n - math.lgamma(k + 1) - math.lgamma(n - k + 1) for k in range(n + 1))


@lru_cache(maxsize=1024)
def _cdf(n: int, q: float) -> tuple[float, ...]:
    """P(K <= k) for k = 0..n."""
    out, total = [], 0.0
    for pmf in _pmfs(n, q):
        total += pmf
        out.append(min(total, 1.0))
    out[-1] = 1.0
    return tuple(out)


@lru_cache(maxsize=1024)
def order_statistic_ranks(
    n: int, percentile: float, confidence: float = CONFIDENCE
) -> tuple[int | None, int | None]:
    """1-based ranks (r, s) of the order statistics bounding the p-th percentile from n draws:
    r the largest with P(K >= r) >= 1 - a, s the smallest with P(K <= s - 1) >= 1 - a, where
    a = (1 - confidence) / 2; None where no rank among 1..n reaches it."""
    if n < 1:
        return None, None
    q, side = percentile / 100.0, (1.0 - confidence) / 2.0
    cdf = _cdf(n, q)
    # lower: P(K >= r) = 1 - F(r - 1) >= 1 - side  <=>  F(r - 1) <= side
    below = [k for k in range(n) if cdf[k] <= side]
    lo_rank = below[-1] + 1 if below else None
    # upper: F(s - 1) >= 1 - side, s - 1 in 0..n-1
    above = [k for k in range(n) if cdf[k] >= 1.0 - side]
    hi_rank = above[0] + 1 if above else None
    return lo_rank, hi_rank


def min_samples_for_upper(percentile: float, confidence: float = CONFIDENCE) -> int:
    """The fewest draws whose largest value bounds the p-th percentile from above: the first n
    with (p/100)^n <= (1 - confidence) / 2 (what a table says when there is no upper bound)."""
    q, side = percentile / 100.0, (1.0 - confidence) / 2.0
    n = max(1, math.ceil(math.log(side) / math.log(q)))
    while q**n > side:  # guard the float rounding of the logs either way
        n += 1
    while n > 1 and q ** (n - 1) <= side:
        n -= 1
    return n


@dataclass(frozen=True)
class PercentileBound:
    """The p-th percentile of n values (interpolated as metrics.json computes it) with its
    order-statistic bounds; `lo`/`hi` are None where n draws cannot give them."""

    percentile: float
    n: int
    value: float | None
    lo: float | None
    hi: float | None
    confidence: float = CONFIDENCE

    @property
    def needs_for_upper(self) -> int:
        """The n at which an upper bound would first exist."""
        return min_samples_for_upper(self.percentile, self.confidence)


def percentile_bound(
    values: Iterable[float], percentile: float, confidence: float = CONFIDENCE
) -> PercentileBound:
    """The two-sided order-statistic interval for the p-th percentile (0 < p < 100) of the
    distribution the values were drawn from; exact for continuous data, conservative with ties."""
    if not 0.0 < percentile < 100.0:
        raise ValueError(f"percentile {percentile} is not in (0, 100)")
    data = sorted(float(v) for v in values)
    n = len(data)
    lo_rank, hi_rank = order_statistic_ranks(n, float(percentile), confidence)
    return PercentileBound(
        percentile=float(percentile),
        n=n,
        value=interpolated_percentile(data, percentile) if data else None,
        lo=data[lo_rank - 1] if lo_rank is not None else None,
        hi=data[hi_rank - 1] if hi_rank is not None else None,
        confidence=confidence,
    )


@lru_cache(maxsize=4096)
def clopper_pearson(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact two-sided interval for a binomial proportion: lo solves P(X >= k; lo) = a,
    hi solves P(X <= k; hi) = a, a = (1 - confidence) / 2; [0, 1] with no trials."""
    if not 0 <= successes <= n:
        raise ValueError(f"{successes} successes out of {n}")
    if n == 0:
        return 0.0, 1.0
    side = (1.0 - confidence) / 2.0
    lo, hi = 0.0, 1.0
    if successes > 0:  # P(X >= k; p) rises with p
        lo = _solve(lambda p: 1.0 - binomial_cdf(successes - 1, n, p), side, rising=True)
    if successes < n:  # P(X <= k; p) falls with p
        hi = _solve(lambda p: binomial_cdf(successes, n, p), side, rising=False)
    return lo, hi


def _solve(f: Callable[[float], float], target: float, rising: bool, steps: int = 52) -> float:
    """The p in [0, 1] where the monotone f(p) equals target, by bisection."""
    lo, hi = 0.0, 1.0
    for _ in range(steps):
        mid = (lo + hi) / 2.0
        if (f(mid) < target) == rising:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


Z_95 = 1.959963984540054  # the normal 97.5 % quantile: value ± Z_95 sd is a 95 % interval


def wilson_interval(successes: float, trials: float) -> tuple[float, float] | None:
    """Wilson's 95 % score interval of a binomial proportion; None without trials."""
    if successes is None or not trials or trials <= 0:
        return None
    p, z2 = successes / trials, Z_95**2
    center = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = Z_95 * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials**2)) / (1 + z2 / trials)
    return max(0.0, center - half), min(1.0, center + half)
