"""Joules from the sampler's series, over any window inside them: power samples integrated by
trapezoids, and a sampled counter interpolated at the window's edges. Pure functions of
(epoch seconds, value) pairs.

Power samples (`integrate_power`): the series is clipped at the window's edges by linear
interpolation between the two samples around each edge, then summed by trapezoids. Its stated
error holds when the power moves monotonically between two samples (nothing faster than the
sampling shows): a whole interval of length h between readings p0 and p1 is then off by at
most h·|p1 − p0|/2 (the curve stays in the h × |p1 − p0| box the chord halves), a part of
length o cut by an edge by at most o·|p1 − p0|. A gap between two samples longer than
`max_gap_factor` × the sampler's interval, or a window the samples do not cover, makes the
figure invalid, with the reason. What the error leaves out: the sensor's own averaging (on
Hopper a reading is a one-second mean, so it lags) and, on A100/H100, a sensor that samples part
of the time; the cross-check against the counter (`cross_check`) shows how far those go.

A sampled counter (`counter_energy`): its value at each edge interpolated between the reads
around it; the counter only grows between them, so each edge is off by at most the larger part
of its interval's energy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .windows import Window

MAX_GAP_FACTOR = 3.0

Series = Sequence[tuple[float, float]]


@dataclass(frozen=True)
class Integral:
    """Joules over a window from a series, its stated error, the peak and mean power seen, how
    many samples lay inside, the longest gap, and whether the figure holds (`reason` if not)."""

    joules: float | None
    error_j: float | None
    peak_w: float | None
    samples: int
    max_gap_s: float | None
    valid: bool
    reason: str = ""


def _at(series: Series, i: int, t: float) -> float:
    """The series' value at `t`, between its points i and i + 1, by linear interpolation."""
    (t0, v0), (t1, v1) = series[i], series[i + 1]
    return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def _covering(series: Series, window: Window) -> tuple[int, int] | str:
    """The indices of the samples at or around the window's edges, or why there are none."""
    if len(series) < 2:
        return f"{len(series)} sample(s): too few to integrate"
    times = [t for t, _ in series]
    if times[0] > window.start_s or times[-1] < window.end_s:
        return (
            f"the samples ({times[0]:.3f}-{times[-1]:.3f}) do not cover the window "
            f"({window.start_s:.3f}-{window.end_s:.3f})"
        )
    first = max(i for i, t in enumerate(times) if t <= window.start_s)
    last = min(i for i, t in enumerate(times) if t >= window.end_s)
    return first, max(last, first + 1)


def _gap_check(
    series: Series, first: int, last: int, interval_s: float, max_gap_factor: float
) -> tuple[float, str]:
    gaps = [series[i + 1][0] - series[i][0] for i in range(first, last)]
    longest = max(gaps)
    if longest > max_gap_factor * interval_s:
        return longest, (
            f"a gap of {longest:.2f} s between samples (over {max_gap_factor:g} x the "
            f"{interval_s:g} s interval): the power in it was not seen"
        )
    return longest, ""


def integrate_power(
    series: Series, window: Window, interval_s: float, max_gap_factor: float = MAX_GAP_FACTOR
) -> Integral:
    """Trapezoids over the power samples (W) clipped to `window`, with the stated error."""
    span = _covering(series, window)
    if isinstance(span, str):
        return Integral(None, None, None, len(series), None, False, span)
    first, last = span
    longest, reason = _gap_check(series, first, last, interval_s, max_gap_factor)
    joules = error = 0.0
    for i in range(first, last):
        (t0, p0), (t1, p1) = series[i], series[i + 1]
        a, b = max(t0, window.start_s), min(t1, window.end_s)
        if b <= a:
            continue
        pa, pb = _at(series, i, a), _at(series, i, b)
        joules += (b - a) * (pa + pb) / 2
        whole = a == t0 and b == t1
        error += (t1 - t0) * abs(p1 - p0) / 2 if whole else (b - a) * abs(p1 - p0)
    inside = [p for t, p in series if window.start_s <= t <= window.end_s]
    edges = [_at(series, first, window.start_s), _at(series, last - 1, window.end_s)]
    peak = max(inside + edges)
    return Integral(joules, error, peak, len(inside), longest, not reason, reason)


def counter_energy(
    series: Series, window: Window, interval_s: float, max_gap_factor: float = MAX_GAP_FACTOR
) -> Integral:
    """A sampled counter's joules (J, cumulative) over `window`, interpolated at its edges; the
    peak is the highest mean power between two reads inside the window."""
    span = _covering(series, window)
    if isinstance(span, str):
        return Integral(None, None, None, len(series), None, False, span)
    first, last = span
    longest, reason = _gap_check(series, first, last, interval_s, max_gap_factor)
    start_i = first
    end_i = last - 1
    start_j = _at(series, start_i, window.start_s)
    end_j = _at(series, end_i, window.end_s)

    def edge_error(i: int, t: float) -> float:
        (t0, e0), (t1, e1) = series[i], series[i + 1]
        share = 0.0 if t1 == t0 else (t - t0) / (t1 - t0)
        return (e1 - e0) * max(share, 1 - share)

    error = edge_error(start_i, window.start_s) + edge_error(end_i, window.end_s)
    slopes = [
        (series[i + 1][1] - series[i][1]) / (series[i + 1][0] - series[i][0])
        for i in range(first, last)
        if series[i + 1][0] > series[i][0]
    ]
    inside = sum(window.start_s <= t <= window.end_s for t, _ in series)
    peak = max(slopes) if slopes else None
    return Integral(end_j - start_j, error, peak, inside, longest, not reason, reason)


@dataclass(frozen=True)
class CrossCheck:
    """The counter's joules against the power samples' over the same window: how far apart,
    in % of the counter's, and whether that is within the samples' stated error."""

    counter_j: float
    power_samples_j: float
    power_samples_error_j: float
    difference_pct: float
    within_error: bool
    samples_valid: bool
    reason: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "counter_j": self.counter_j,
            "power_samples_j": self.power_samples_j,
            "power_samples_error_j": self.power_samples_error_j,
            "difference_pct": self.difference_pct,
            "within_error": self.within_error,
            "samples_valid": self.samples_valid,
            "reason": self.reason or None,
        }


def cross_check(counter_j: float, power: Integral) -> CrossCheck | None:
    """None when the power samples gave no figure (no power readings, nothing to compare)."""
    if power.joules is None or power.error_j is None or counter_j <= 0:
        return None
    gap = power.joules - counter_j
    return CrossCheck(
        counter_j,
        power.joules,
        power.error_j,
        100.0 * gap / counter_j,
        abs(gap) <= power.error_j,
        power.valid,
        power.reason,
    )
