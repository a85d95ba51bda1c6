"""Reading a workload's latency-goal search (`workloads.<w>.search`) into the planner's
`slo.search.SearchSettings`: checks that refuse a value before anything runs, each naming the key.
The planner itself (`next_probe`) is in `slo.search`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..slo.objectives import Slo
from ..slo.search import (
    CONCURRENCY,
    DEFAULT_EXTENSION_FACTOR,
    DEFAULT_MAX_EXTENSIONS,
    EXTENSION_FACTOR_CAP,
    MAX_EXTENSIONS_CAP,
    RATE_DIGITS,
    REQUEST_RATE,
    Load,
    SearchSettings,
)
from ..vocabulary import ConfigError
from .sweeps import AXES, point_part

SEARCH_KEYS = ("over", "min", "max", "tolerance", "max_extensions", "extension_factor")
MIN_RATE = 1e-4  # the smallest rate `:g` writes without an exponent (1e-05 is `1e-05`)


def load_label(spec: SearchSettings, load: Load) -> str:
    """`c8`, `r2.5`: a probe's load as a point's name writes it."""
    return point_part("", spec.over, load)


def probe_part(spec: SearchSettings, workload: str, key: tuple[Load, int]) -> str:
    """The workload part of a probe's cell id: `w-c8`, `w-c8-x1` (extension 1), `w-r2.5`."""
    load, extension = key
    part = point_part(workload, spec.over, load)
    return f"{part}-x{extension}" if extension else part


def search_settings(
    mapping: Any, where: str, workload: Mapping[str, Any] | None = None
) -> SearchSettings:
    """The search a config's `search` mapping states; `where` is its key path
    (`workloads.w.search`), `workload` the mapping it sits in (a sweep or a fixed rate beside
    it is refused). Raises ConfigError naming the key."""
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"config key '{where}': a mapping {{over, min, max}}, not {mapping!r}")
    for key in mapping:
        if key not in SEARCH_KEYS:
            raise ConfigError(
                f"config key '{where}.{key}': unknown; a search takes {', '.join(SEARCH_KEYS)}"
            )
    for key in ("over", "min", "max"):
        if key not in mapping:
            raise ConfigError(f"config key '{where}.{key}': missing")
    over = mapping["over"]
    if over not in AXES:
        raise ConfigError(
            f"config key '{where}.over': {over!r}; a search is over {' or '.join(AXES)}"
        )
    low = _load(mapping["min"], over, f"{where}.min")
    high = _load(mapping["max"], over, f"{where}.max")
    if high < low:
        raise ConfigError(f"config key '{where}.max': {high:g} is below min {low:g}")
    tolerance = mapping.get("tolerance")
    if over == REQUEST_RATE:
        if tolerance is None:
            raise ConfigError(
                f"config key '{where}.tolerance': missing; a rate search bisects to a stated "
                "relative tolerance (e.g. 0.05)"
            )
        tolerance = _number(tolerance, f"{where}.tolerance")
        if not 0.0 < tolerance < 1.0:
            raise ConfigError(
                f"config key '{where}.tolerance': {tolerance:g} is not in (0, 1): it is the "
                "gap left between the largest passing and the smallest failing rate, relative "
                "to the latter"
            )
    elif tolerance is not None:
        raise ConfigError(
            f"config key '{where}.tolerance': a concurrency search bisects to an integer; "
            "a tolerance is for a request_rate search"
        )
    extensions = mapping.get("max_extensions", DEFAULT_MAX_EXTENSIONS)
    if isinstance(extensions, bool) or not isinstance(extensions, int) or extensions < 0:
        raise ConfigError(
            f"config key '{where}.max_extensions': {extensions!r} is not a count (0 or more)"
        )
    if extensions > MAX_EXTENSIONS_CAP:
        raise ConfigError(
            f"config key '{where}.max_extensions': {extensions}; at most "
            f"{MAX_EXTENSIONS_CAP} (each extension reruns a load with more prompts)"
        )
    factor = _number(
        mapping.get("extension_factor", DEFAULT_EXTENSION_FACTOR), f"{where}.extension_factor"
    )
    if not 1.0 < factor <= EXTENSION_FACTOR_CAP:
        raise ConfigError(
            f"config key '{where}.extension_factor': {factor:g}; an extension runs more "
            f"prompts than the run before it: a factor above 1 and at most "
            f"{EXTENSION_FACTOR_CAP:g}"
        )
    if workload is not None:
        _check_beside(workload, over, where.rpartition(".")[0] or where)
    return SearchSettings(over, low, high, tolerance, extensions, factor)


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


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"config key '{where}': {value!r} is not a finite number")
    return float(value)


def _load(value: Any, over: str, where: str) -> Load:
    if over == CONCURRENCY:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"config key '{where}': {value!r}; a concurrency is an integer >= 1")
        return value
    rate = _number(value, where)
    if rate <= 0.0:
        raise ConfigError(f"config key '{where}': {rate:g}; a request rate is above 0")
    rate = float(f"{rate:.{RATE_DIGITS}g}")
    label = point_part("", over, rate)
    if "e" in label:  # `:g` writes a rate below 1e-4 with an exponent, which no probe id reads
        raise ConfigError(
            f"config key '{where}': {value!r}; a probe at that rate would be named '{label}', "
            f"which does not read back as a rate: a searched rate is at least {MIN_RATE:g} "
            "requests/s"
        )
    return rate


def goal_of(name: str, workload: Mapping[str, Any]) -> tuple[Slo | None, SearchSettings | None]:
    """A workload's goal and search, checked together: a search needs a goal to decide by."""
    where = f"workloads.{name}"
    slo = Slo.from_config(workload["slo"], f"{where}.slo") if "slo" in workload else None
    spec = None
    if "search" in workload:
        spec = search_settings(workload["search"], f"{where}.search", workload)
        if slo is None:
            raise ConfigError(
                f"config key '{where}.search': a search needs a goal to decide by ({where}.slo)"
            )
    return slo, spec
