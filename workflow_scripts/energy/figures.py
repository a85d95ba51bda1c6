"""A cell's energy record from what was gathered while it ran: a pure function of the source's
description, the counter's reads at the window's edges, the sampler's power and counter series,
the idle baseline and the request records.

- `counter`: the joules between the two reads (each counter's delta, wraps undone, in its
  unit), over the window between them; the power samples, where the source gives them, are
  integrated over the same window as a cross-check. `power samples`: the window is the bench
  window (first send to last finish), the joules the integral over it.
- The tokens are those streamed inside the window (all of the bench's when the reads enclose
  it), so J per token divides figures of one window.
- The steady state and its slices take their joules from the sampled counter where there is
  one, else from the power samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..loadgen.records import RequestRecord
from .counters import CounterRead, deltas, wrap_time_s
from .interval import ratio_interval, slice_count
from .meter import IdleBaseline
from .record import MEASURED, EnergyRecord, Steady
from .samples import Integral, Series, counter_energy, cross_check, integrate_power
from .source import COUNTER, SourceInfo
from .windows import Window, bench_window, slice_tokens, steady_window, tokens_in


@dataclass(frozen=True)
class Readings:
    """What a cell gathered: the counter's reads at the window's edges (counter method), the
    sampler's power (W) and counter (J since its first read) series in epoch seconds, and the
    sampler's interval."""

    start: CounterRead | None
    end: CounterRead | None
    power: Series = ()
    energy: Series = ()
    interval_s: float = 0.5


def _counter_joules(info: SourceInfo, readings: Readings) -> tuple[Window, float, list[str]]:
    """Joules between the reads, and a note per counter whose window may hide a second wrap."""
    if readings.start is None or readings.end is None or info.unit_j is None:
        raise ValueError("the counter method needs a read at each edge of the window")
    window = Window(readings.start.t_s, readings.end.t_s)
    each = deltas(readings.start, readings.end, info.ranges_raw)
    notes = []
    for device, raw, range_raw in zip(info.devices, each, info.ranges_raw, strict=True):
        if range_raw is None or window.duration_s <= 0:
            continue
        wrap_s = wrap_time_s(range_raw * info.unit_j, raw * info.unit_j / window.duration_s)
        if wrap_s is not None and window.duration_s >= wrap_s:
            notes.append(
                f"{device.get('zone', device)}: the window ({window.duration_s:.0f} s) is longer "
                f"than the counter's wrap time at its power ({wrap_s:.0f} s): a second wrap "
                "cannot be ruled out"
            )
    return window, sum(each) * info.unit_j, notes


def _series_energy(readings: Readings, window: Window) -> Integral | None:
    if len(readings.energy) >= 2:
        return counter_energy(readings.energy, window, readings.interval_s)
    if len(readings.power) >= 2:
        return integrate_power(readings.power, window, readings.interval_s)
    return None


def steady_state(
    readings: Readings, records: Sequence[RequestRecord], origin_s: float, slots: int
) -> Steady | str:
    """The steady state's joules, tokens and interval, or why there are none."""
    window = steady_window(records, origin_s, slots)
    if window is None:
        return f"the {slots} slots were never all busy before the first drained: no steady state"
    energy = _series_energy(readings, window)
    if energy is None or energy.joules is None:
        return "no sampled counter or power series over the steady state" + (
            f" ({energy.reason})" if energy is not None and energy.reason else ""
        )
    tokens = tokens_in(records, window, origin_s)
    count = slice_count(window.duration_s, readings.interval_s)
    interval = None
    if count:
        pieces = slice_tokens(records, window, count, origin_s)
        each = [_series_energy(readings, p.window) for p in pieces]
        joules = [j.joules for j in each if j is not None and j.joules is not None]
        if len(joules) == count:
            tokens_each = [p.output_tokens for p in pieces]
            interval = ratio_interval(joules, tokens_each, window.duration_s / count)
    return Steady(
        window, energy.joules, energy.error_j, tokens.output_tokens, tokens.prompt_tokens, interval
    )


def cell_energy(
    info: SourceInfo,
    readings: Readings,
    idle: IdleBaseline | None,
    records: Sequence[RequestRecord],
    origin_s: float,
    slots: int,
) -> EnergyRecord:
    """The measured record of one cell (or one point on a shared server: its own reads and
    records, the series' idle baseline). `origin_s`: the epoch time of the records' `sent_s`
    zero; `slots`: the point's concurrency."""
    notes = list(info.notes)
    cross = None
    if info.method == COUNTER:
        window, joules, wrap_notes = _counter_joules(info, readings)
        notes += wrap_notes
        error_j = (info.unit_j or 0.0) * len(info.devices)
        valid = not wrap_notes
        power = integrate_power(readings.power, window, readings.interval_s)
        if len(readings.power) >= 2:
            cross = cross_check(joules, power)
        peak = power.peak_w if power.joules is not None else None
        if peak is None and len(readings.energy) >= 2:
            peak = counter_energy(readings.energy, window, readings.interval_s).peak_w
    else:
        bench = bench_window(records, origin_s)
        if bench is None:
            raise ValueError("no measured request finished: no bench window to integrate over")
        window = bench
        power = integrate_power(readings.power, window, readings.interval_s)
        joules, error_j, peak, valid = power.joules, power.error_j, power.peak_w, power.valid
        if power.reason:
            notes.append(power.reason)
    tokens = tokens_in(records, window, origin_s)
    steady = steady_state(readings, records, origin_s, slots)
    return EnergyRecord(
        status=MEASURED,
        source=info.source,
        method=info.method,
        devices=info.devices,
        scope=info.scope,
        window=window,
        idle_window=idle.window if idle else None,
        joules=joules,
        error_j=error_j,
        idle_w=idle.watts if idle else None,
        peak_w=peak,
        output_tokens=tokens.output_tokens,
        prompt_tokens=tokens.prompt_tokens,
        resolution_j=info.unit_j,
        valid=valid,
        cross_check=cross,
        steady=steady if isinstance(steady, Steady) else None,
        steady_reason=steady if isinstance(steady, str) else "",
        notes=tuple(notes),
    )
