"""Energy counters read at a window's edges, and the joules between two reads: what the NVML and
RAPL readers both give, as pure functions.

A counter only grows, in whole units of its own (NVML: mJ; powercap: µJ), until it wraps
around at its range (powercap's `max_energy_range_uj`; NVML's 64-bit mJ counter never does in
practice). One wrap between two reads shows as an end below the start, and is undone by adding
the range; a second wrap in one window looks like none, so a window must be shorter than the
counter's wrap time at the power drawn (`wrap_time_s`), or be covered by reads closer than it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CounterRead:
    """Every counter of a source read once: `t_s` (epoch seconds, taken right before the first
    counter is read) and each counter's raw value, in the source's unit."""

    t_s: float
    raw: tuple[int, ...]


def counter_delta(start: int, end: int, range_raw: int | None) -> int:
    """Raw units between two reads of one counter; one wrap-around (end below start) is undone
    with the counter's range. Without a range, a counter that went down was reset (a driver
    reload): refused rather than guessed."""
    if end >= start:
        return end - start
    if range_raw is None:
        raise ValueError(f"the counter went down ({start} -> {end}) and has no range to wrap at")
    return end + range_raw - start


def deltas(
    start: CounterRead, end: CounterRead, ranges_raw: Sequence[int | None]
) -> tuple[int, ...]:
    """Each counter's raw units between two reads of a source."""
    if len(start.raw) != len(end.raw) or len(start.raw) != len(ranges_raw):
        raise ValueError("two reads of one source must read the same counters")
    return tuple(
        counter_delta(a, b, r) for a, b, r in zip(start.raw, end.raw, ranges_raw, strict=True)
    )


def wrap_time_s(range_j: float, watts: float) -> float | None:
    """How long the counter takes to wrap around at `watts`: a window longer than this may
    hide a second wrap. None when nothing is drawn (it never wraps)."""
    return range_j / watts if watts > 0 else None


class Accumulator:
    """Joules since the first read, from successive reads of a source (the sampler's
    `energy_j`): each step's wrap is undone, so a long run is right as long as two reads are
    closer than the wrap time. A counter that went down without a range to wrap at (a reset:
    a driver reload) leaves no total past it: every later read gives None, never an error, so
    the sampler's thread and the phase it marks go on (the bench's own edges say not measured)."""

    def __init__(self, unit_j: float, ranges_raw: Sequence[int | None]) -> None:
        self.unit_j = unit_j
        self.ranges_raw = tuple(ranges_raw)
        self._last: CounterRead | None = None
        self._total_raw = 0
        self._reset = False

    def add(self, read: CounterRead) -> float | None:
        if self._reset:
            return None
        if self._last is not None:
            try:
                self._total_raw += sum(deltas(self._last, read, self.ranges_raw))
            except ValueError:
                self._reset = True
                return None
        self._last = read
        return self._total_raw * self.unit_j
