"""What every energy source (NVML, RAPL) answers, and how one that cannot be read says why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..vocabulary import ENERGY_NONE as NONE
from ..vocabulary import ENERGY_NVML as NVML
from ..vocabulary import ENERGY_RAPL as RAPL
from .counters import CounterRead

SOURCES = (NVML, RAPL, NONE)
COUNTER = "counter"
POWER_SAMPLES = "power samples"
METHODS = (COUNTER, POWER_SAMPLES)


class SourceUnavailable(Exception):
    """A source that cannot be read here; the message says why, in words for metrics.json."""


@dataclass(frozen=True)
class SourceInfo:
    """A source as it was opened: its name, how its joules are read, the devices or domains it
    reads (one counter each, in order), the counter's unit (its resolution) and range, what the
    joules cover (`scope`), and anything a reader of the figure must know (`notes`)."""

    source: str
    method: str
    devices: tuple[dict[str, Any], ...]
    unit_j: float | None
    ranges_raw: tuple[int | None, ...]
    scope: str
    notes: tuple[str, ...] = ()


class EnergySource(Protocol):
    """An opened source: its description, a read of its counters (None when it has none to
    read: power samples only), the power it draws now (None where it gives no power reading)
    and its joules since its first `energy_j` call (the sampler's series)."""

    def info(self) -> SourceInfo: ...

    def read(self) -> CounterRead | None: ...

    def power_w(self) -> float | None: ...

    def energy_j(self) -> float | None: ...

    def close(self) -> None: ...
