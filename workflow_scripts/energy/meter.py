"""The one way to open an energy source and take the idle baseline.

`open_source` tries the sources in order (NVML, then RAPL, unless told otherwise: a CPU
engine's cell on a machine with a GPU asks for RAPL first) and gives the first that can be read,
or `Unavailable`, which names each source tried and why it failed. `idle_baseline` reads it over
a short window before the server starts: the devices' draw with nothing running, which every
point of the server's series is held against.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .counters import CounterRead, deltas
from .nvml import NvmlSource
from .rapl import RaplSource
from .samples import Series, integrate_power
from .source import COUNTER, NVML, POWER_SAMPLES, RAPL, EnergySource, SourceInfo, SourceUnavailable
from .windows import Window

DEFAULT_ORDER = (NVML, RAPL)
IDLE_S = 3.0


@dataclass(frozen=True)
class Unavailable:
    """No source could be read: (source, why) for each one tried."""

    tried: tuple[tuple[str, str], ...]

    @property
    def reason(self) -> str:
        return "; ".join(f"{source}: {why}" for source, why in self.tried)


def open_source(
    order: Sequence[str] = DEFAULT_ORDER,
    visible_devices: str | None = None,
    powercap_root: Path | None = None,
    clock: Callable[[], float] = time.time,
) -> EnergySource | Unavailable:
    """The first source of `order` that can be read; `visible_devices` is the server's
    CUDA_VISIBLE_DEVICES (None: unset)."""
    openers: dict[str, Callable[[], EnergySource]] = {
        NVML: lambda: NvmlSource(visible_devices, clock),
        RAPL: lambda: RaplSource(powercap_root, clock),
    }
    tried = []
    for name in order:
        try:
            return openers[name]()
        except SourceUnavailable as exc:
            tried.append((name, str(exc)))
    return Unavailable(tuple(tried))


@dataclass(frozen=True)
class IdleBaseline:
    """The draw with nothing running: its window (epoch s), watts (summed over the devices
    read), and the joules it is from; `reason` when it could not be read."""

    window: Window
    watts: float | None
    joules: float | None
    method: str
    reason: str = ""

    def to_dict(self) -> dict[str, object]:
        """As a shared server's record carries it to its points."""
        return {
            "window": {"start_s": self.window.start_s, "end_s": self.window.end_s},
            "watts": self.watts,
            "joules": self.joules,
            "method": self.method,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IdleBaseline:
        window = Window(float(data["window"]["start_s"]), float(data["window"]["end_s"]))
        return cls(window, data["watts"], data["joules"], data["method"], data.get("reason", ""))


def idle_from_reads(info: SourceInfo, start: CounterRead, end: CounterRead) -> IdleBaseline:
    """The idle draw from two counter reads (the memory baseline's window, or one of its own)."""
    window = Window(start.t_s, end.t_s)
    if info.unit_j is None or window.duration_s <= 0:
        return IdleBaseline(window, None, None, COUNTER, "no counter, or an empty window")
    joules = sum(deltas(start, end, info.ranges_raw)) * info.unit_j
    return IdleBaseline(window, joules / window.duration_s, joules, COUNTER)


def idle_from_power(series: Series, window: Window, interval_s: float) -> IdleBaseline:
    """The idle draw from power samples over `window` (trapezoids, as a cell's)."""
    integral = integrate_power(series, window, interval_s)
    if integral.joules is None or not integral.valid or window.duration_s <= 0:
        return IdleBaseline(window, None, integral.joules, POWER_SAMPLES, integral.reason)
    return IdleBaseline(window, integral.joules / window.duration_s, integral.joules, POWER_SAMPLES)


def idle_baseline(
    source: EnergySource,
    seconds: float = IDLE_S,
    interval_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> IdleBaseline:
    """Read `source` over `seconds` of its own (call it before the server starts)."""
    info = source.info()
    if info.method == COUNTER:
        start = source.read()
        sleep(seconds)
        end = source.read()
        if start is None or end is None:
            raise SourceUnavailable("a counter source gave no read")
        return idle_from_reads(info, start, end)
    series: list[tuple[float, float]] = []
    started = clock()
    while True:
        now, watts = clock(), source.power_w()
        if watts is not None:
            series.append((now, watts))
        if now - started >= seconds:
            break
        sleep(interval_s)
    if len(series) < 2:
        return IdleBaseline(Window(started, started), None, None, POWER_SAMPLES, "no power reading")
    return idle_from_power(series, Window(series[0][0], series[-1][0]), interval_s)
