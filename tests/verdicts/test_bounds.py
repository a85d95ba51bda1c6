"""Distribution-free bounds (workflow_scripts.verdicts.bounds): the binomial CDF against exact
fractions, the chosen order statistics the tightest ones that hold their level, a simulated
coverage within a point of nominal (and not far above it) on an exponential and a lognormal,
no upper bound where n draws cannot give one, and the Clopper-Pearson interval against known
values and by simulation."""

from __future__ import annotations

import math
import statistics
from fractions import Fraction

import numpy as np
import pytest

from workflow_scripts.verdicts.bounds import (
    binomial_cdf,
    clopper_pearson,
    min_samples_for_upper,
    order_statistic_ranks,
    percentile_bound,
    wilson_interval,
)

DRAWS = 4000
SIDE = 0.025  # each bound of the default 95 % two-sided interval leaves out 2.5 %


def exact_cdf(k: int, n: int, q: Fraction) -> Fraction:
    return sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k + 1))


@pytest.mark.parametrize(("n", "q"), [(10, "1/2"), (16, "99/100"), (50, "9/10"), (200, "1/4")])
def test_the_binomial_cdf_matches_exact_fractions(n, q):
    q = Fraction(q)
    for k in range(-1, n + 1):
        assert binomial_cdf(k, n, float(q)) == pytest.approx(float(exact_cdf(k, n, q)), abs=1e-12)


def test_the_cdf_stays_finite_for_a_large_n():
    assert binomial_cdf(90_000, 100_000, 0.9) == pytest.approx(0.5, abs=0.01)
    assert binomial_cdf(0, 100_000, 0.9) == 0.0


@pytest.mark.parametrize("n", [10, 16, 35, 36, 50, 200, 400])
@pytest.mark.parametrize("p", [50.0, 90.0, 99.0])
def test_the_ranks_are_the_tightest_that_keep_each_side_at_97_5_percent(n, p):
    """Each bound holds its one-sided level, and the next rank inward would not: the interval
    is as narrow as an order-statistic interval at this level can be."""
    q = p / 100
    r, s = order_statistic_ranks(n, p)
    if r is not None:
        assert 1 - binomial_cdf(r - 1, n, q) >= 1 - SIDE  # P(x_(r) <= xi)
        assert r == n or 1 - binomial_cdf(r, n, q) < 1 - SIDE
    else:
        assert 1 - binomial_cdf(0, n, q) < 1 - SIDE  # not even the smallest value
    if s is not None:
        assert binomial_cdf(s - 1, n, q) >= 1 - SIDE  # P(x_(s) >= xi)
        assert s == 1 or binomial_cdf(s - 2, n, q) < 1 - SIDE
    else:
        assert binomial_cdf(n - 1, n, q) < 1 - SIDE  # not even the largest value


def test_a_p99_from_16_requests_has_no_upper_bound():
    values = list(np.random.default_rng(3).exponential(size=16))
    bound = percentile_bound(values, 99)
    assert bound.hi is None and bound.lo is not None
    assert bound.n == 16 and bound.value == pytest.approx(np.percentile(values, 99))
    assert bound.needs_for_upper == 368  # 0.99^367 > 0.025 >= 0.99^368
    assert 0.99**367 > SIDE >= 0.99**368
    assert percentile_bound(range(367), 99).hi is None
    assert percentile_bound(range(368), 99).hi == 367  # the largest value
    assert min_samples_for_upper(90) == 36 and percentile_bound(range(36), 90).hi == 35


def test_no_values_and_bad_percentiles():
    empty = percentile_bound([], 90)
    assert (empty.n, empty.value, empty.lo, empty.hi) == (0, None, None, None)
    for bad in (0, 100, -1, 101):
        with pytest.raises(ValueError):
            percentile_bound([1.0, 2.0], bad)


TRUE_QUANTILE = {
    "exponential": lambda q: -math.log1p(-q),
    "lognormal": lambda q: math.exp(statistics.NormalDist().inv_cdf(q)),
}


def draw(rng, kind, size):
    return rng.exponential(size=size) if kind == "exponential" else rng.lognormal(size=size)


@pytest.mark.parametrize("kind", ["exponential", "lognormal"])
@pytest.mark.parametrize(("n", "p"), [(50, 90), (200, 90), (50, 99), (200, 99), (400, 99)])
def test_simulated_coverage_is_within_a_point_of_nominal(kind, n, p):
    """4000 runs of n requests: each bound covers the true percentile at least 97.5 % - 1 of
    the time, the interval at least 95 % - 1 and at most 98.5 % (not absurdly conservative),
    and each figure within 3 standard errors of its exact binomial value."""
    rng = np.random.default_rng(1000 * n + p + len(kind))
    xi = TRUE_QUANTILE[kind](p / 100)
    found = [percentile_bound(row, p) for row in draw(rng, kind, (DRAWS, n))]
    r, s = order_statistic_ranks(n, float(p))
    cdf = [binomial_cdf(k, n, p / 100) for k in range(n + 1)]
    se = 3 * math.sqrt(0.05 * 0.95 / DRAWS)
    if r is not None:
        lower = np.mean([b.lo <= xi for b in found])
        assert lower >= 1 - SIDE - 0.01
        assert lower == pytest.approx(1 - cdf[r - 1], abs=se)
    if s is not None:
        upper = np.mean([b.hi >= xi for b in found])
        assert upper >= 1 - SIDE - 0.01
        assert upper == pytest.approx(cdf[s - 1], abs=se)
    else:
        assert all(b.hi is None for b in found)
    if r is not None and s is not None:
        both = np.mean([b.lo <= xi <= b.hi for b in found])
        assert 0.95 - 0.01 <= both <= 0.985
        assert both == pytest.approx(cdf[s - 1] - cdf[r - 1], abs=se)
        print(f"{kind} n={n} p{p}: two-sided coverage {both:.4f}")
    print(f"{kind} n={n} p{p}: ranks {r}, {s}; lower {lower:.4f}" if r else "")
    print(f"{kind} n={n} p{p}: upper {upper:.4f}" if s else f"{kind} n={n} p{p}: no upper")


def test_a_one_sided_95_interval_would_fall_short_of_two_sided_95():
    """The check above can fail: bounds picked at 95 % one-sided each (a 90 % interval) cover
    the p90 of an exponential well under 94 % of the time."""
    rng = np.random.default_rng(7)
    xi = TRUE_QUANTILE["exponential"](0.9)
    found = [percentile_bound(row, 90, 0.90) for row in rng.exponential(size=(DRAWS, 200))]
    assert np.mean([b.lo <= xi <= b.hi for b in found]) < 0.94


def test_clopper_pearson_matches_known_values():
    assert clopper_pearson(5, 10) == pytest.approx((0.18709, 0.81291), abs=1e-5)
    assert clopper_pearson(0, 10) == pytest.approx((0.0, 1 - 0.025**0.1))
    assert clopper_pearson(10, 10) == pytest.approx((0.025**0.1, 1.0))
    assert clopper_pearson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        clopper_pearson(11, 10)


def test_clopper_pearson_covers_at_least_95_percent():
    rng = np.random.default_rng(11)
    for n, p in ((40, 0.9), (200, 0.95)):
        hits = rng.binomial(n, p, size=2000)
        covered = np.mean([lo <= p <= hi for lo, hi in (clopper_pearson(int(k), n) for k in hits)])
        assert covered >= 0.95 - 0.01


@pytest.mark.parametrize(
    ("successes", "trials", "lo", "hi"),
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611),
     (1, 29, 0.0061, 0.1718)],
)  # fmt: skip
def test_wilson_interval_matches_newcombe_1998(successes, trials, lo, hi):
    """Newcombe, Statistics in Medicine 17 (1998), Table II, the score method without
    continuity correction, to four places."""
    got = wilson_interval(successes, trials)
    assert got == pytest.approx((lo, hi), abs=5e-5)


def test_wilson_interval_is_none_without_trials():
    assert wilson_interval(0, 0) is None
    assert wilson_interval(None, 10) is None
