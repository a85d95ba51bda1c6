"""A workload's latency goal and search (`workloads.<w>.slo`, `.search`), read from the
validated config (the schema judged each value and filled the defaults in), with the checks a
schema cannot say, each naming the key: a search needs a goal, its min is at most its max, a rate
its probe's name reads back, and no sweep or fixed rate beside it. The planner (`next_probe`) is
in `slo.search`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..slo.objectives import Slo
from ..slo.search import REQUEST_RATE, Load, SearchSettings
from ..vocabulary import ConfigError, point_part
from .sweeps import AXES

MIN_RATE = 1e-4  # the smallest rate `:g` writes without an exponent (1e-05 is `1e-05`)


def load_label(spec: SearchSettings, load: Load) -> str:
    """`c8`, `r2.5`: a probe's load as a point's name writes it."""
    return point_part("", spec.over, load)


def probe_part(spec: SearchSettings, workload: str, key: tuple[Load, int]) -> str:
    """The workload part of a probe's cell id: `w-c8`, `w-c8-x1` (extension 1), `w-r2.5`."""
    load, extension = key
    part = point_part(workload, spec.over, load)
    return f"{part}-x{extension}" if extension else part


def goal_of(name: str, workload: Mapping[str, Any]) -> tuple[Slo | None, SearchSettings | None]:
    """A validated workload's goal and search, checked together: a search needs a goal to
    decide by. Raises ConfigError naming the key."""
    where = f"workloads.{name}"
    slo = Slo.from_dict(workload["slo"]) if "slo" in workload else None
    if "search" not in workload:
        return slo, None
    spec = SearchSettings.from_dict(workload["search"])
    _check_loads(spec, workload["search"], f"{where}.search")
    _check_beside(workload, spec.over, where)
    if slo is None:
        raise ConfigError(
            f"config key '{where}.search': a search needs a goal to decide by ({where}.slo)"
        )
    return slo, spec


def _check_loads(spec: SearchSettings, mapping: Mapping[str, Any], where: str) -> None:
    """A rate's probe id reads back as its rate, and min is at most max; `mapping` is the
    search as configured (what a message quotes)."""
    for key in ("min", "max") if spec.over == REQUEST_RATE else ():
        label = load_label(spec, getattr(spec, key))
        if "e" in label:  # `:g` writes a rate below 1e-4 with an exponent, which no id reads
            raise ConfigError(
                f"config key '{where}.{key}': {mapping[key]!r}; a probe at that rate would be "
                f"named '{label}', which does not read back as a rate: a searched rate is at "
                f"least {MIN_RATE:g} requests/s"
            )
    if spec.max < spec.min:
        raise ConfigError(f"config key '{where}.max': {spec.max:g} is below min {spec.min:g}")


def _check_beside(workload: Mapping[str, Any], over: str, where: str) -> None:
    """A search makes its own points: a sweep beside it, or a fixed rate when it searches the
    rate, would leave unsaid which load a probe runs."""
    for axis in AXES:
        if isinstance(workload.get(axis), list):
            raise ConfigError(
                f"config key '{where}.{axis}': a list (a sweep) beside a search; the search "
                "chooses the loads it probes (give one value, or drop the search)"
            )
    if over == REQUEST_RATE and workload.get(REQUEST_RATE) is not None:
        raise ConfigError(
            f"config key '{where}.{REQUEST_RATE}': a fixed rate beside a search over "
            "request_rate; the search sets each probe's rate"
        )
