"""Power samples integrated by trapezoids and a sampled counter interpolated, on hand-made
series with closed forms; and the time-slice interval."""

from __future__ import annotations

import math

import pytest

from workflow_scripts.energy.interval import MIN_SLICES, ratio_interval, slice_count
from workflow_scripts.energy.samples import counter_energy, cross_check, integrate_power
from workflow_scripts.energy.windows import Window

T0 = 1_700_000_000.0


def ramp(t: float) -> float:
    return 100.0 + 10.0 * (t - T0)  # W; its integral over [a, b] is exact under trapezoids


def test_a_linear_power_is_integrated_exactly_and_clipped_at_the_edges():
    series = [(T0 + 0.5 * k, ramp(T0 + 0.5 * k)) for k in range(21)]
    window = Window(T0 + 1.2, T0 + 8.7)
    integral = integrate_power(series, window, 0.5)
    exact = 100.0 * 7.5 + 5.0 * (8.7**2 - 1.2**2)
    assert integral.joules == pytest.approx(exact, abs=1e-4)  # epoch seconds' float spacing
    assert integral.valid and integral.reason == ""
    assert integral.peak_w == pytest.approx(ramp(T0 + 8.7))
    assert integral.samples == 15  # 1.5, 2.0, ..., 8.5
    # the stated error: whole intervals h*|dp|/2, the two cut ones o*|dp|
    assert integral.error_j == pytest.approx(14 * 0.5 * 5.0 / 2 + (0.3 + 0.2) * 5.0)


def test_a_curved_power_stays_within_the_stated_error():
    def watts(t: float) -> float:
        return 300.0 + 200.0 * math.sin((t - T0) / 3.0)

    def energy(t: float) -> float:
        return 300.0 * (t - T0) - 600.0 * math.cos((t - T0) / 3.0)

    series = [(T0 + 0.5 * k, watts(T0 + 0.5 * k)) for k in range(200)]
    window = Window(T0 + 3.3, T0 + 91.1)
    integral = integrate_power(series, window, 0.5)
    exact = energy(window.end_s) - energy(window.start_s)
    assert abs(integral.joules - exact) <= integral.error_j


def test_a_gap_or_a_window_outside_the_samples_makes_the_figure_invalid():
    series = [(T0 + t, 100.0) for t in (0.0, 0.5, 1.0, 3.0, 3.5)]
    gapped = integrate_power(series, Window(T0 + 0.2, T0 + 3.2), 0.5)
    assert gapped.joules == pytest.approx(300.0)
    assert not gapped.valid
    assert "a gap of 2.00 s" in gapped.reason
    outside = integrate_power(series, Window(T0 - 1.0, T0 + 2.0), 0.5)
    assert outside.joules is None and not outside.valid
    assert "do not cover the window" in outside.reason


def test_a_sampled_counter_is_interpolated_at_the_edges_within_its_error():
    """Counter of a power 50 + 20 t: E = 50 t + 10 t^2, read every 0.5 s."""
    series = [(T0 + 0.5 * k, 50 * 0.5 * k + 10 * (0.5 * k) ** 2) for k in range(41)]
    window = Window(T0 + 2.1, T0 + 17.4)
    integral = counter_energy(series, window, 0.5)
    exact = 50 * (17.4 - 2.1) + 10 * (17.4**2 - 2.1**2)
    assert abs(integral.joules - exact) <= integral.error_j
    # each edge: its interval's energy times the larger share on either side of the edge
    assert integral.error_j == pytest.approx(47.5 * 0.8 + 197.5 * 0.8, abs=1e-4)
    assert integral.peak_w == pytest.approx(50 + 20 * 17.25)  # the last mean before 17.5 s


def test_the_cross_check_says_how_far_apart_the_two_readings_are():
    series = [(T0 + t, 200.0) for t in (0.0, 0.5, 1.0, 1.5, 2.0)]
    power = integrate_power(series, Window(T0, T0 + 2.0), 0.5)
    check = cross_check(404.0, power)
    assert check.power_samples_j == pytest.approx(400.0)
    assert check.difference_pct == pytest.approx(-100 * 4 / 404)
    assert check.within_error is False  # a flat series states no error
    assert cross_check(404.0, integrate_power([], Window(T0, T0 + 1), 0.5)) is None


def test_the_slice_interval_brackets_the_ratio_and_needs_enough_slices():
    joules = [10.0, 12.0, 9.0, 11.0, 10.5, 9.5, 10.0, 12.5]
    tokens = [100.0, 110.0, 95.0, 100.0, 105.0, 90.0, 100.0, 120.0]
    interval = ratio_interval(joules, tokens, 2.0)
    ratio = sum(joules) / sum(tokens)
    assert interval.lo < ratio < interval.hi
    assert interval.slices == 8 and interval.slice_s == 2.0
    assert ratio_interval(joules, tokens, 2.0) == interval  # seeded
    even = ratio_interval([5.0] * 6, [50.0] * 6, 1.0)
    assert (even.lo, even.hi) == pytest.approx((0.1, 0.1))
    short = ratio_interval(joules[: MIN_SLICES - 1], tokens[: MIN_SLICES - 1], 2.0)
    assert short.lo is None and "fewer than" in short.reason
    assert slice_count(60.0, 0.5) == 20 and slice_count(4.0, 0.5) == 4
