"""A workload's latency goal (`workloads.<w>.slo`): objectives, each a latency figure, a
percentile and a limit, and an optional attainment target; refused before anything runs when a
value cannot mean anything, the message naming the key."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..vocabulary import ConfigError

# The figures an objective may bound: metrics.json's names, each a per-request latency in ms.
FIGURES = ("ttft_ms", "tpot_ms", "e2el_ms")
ATTAINMENT = "attainment"
OBJECTIVE_KEYS = ("percentile", "max")


@dataclass(frozen=True)
class Objective:
    """`figure` at the `percentile`-th percentile is at most `max_ms`."""

    figure: str  # one of FIGURES
    percentile: float  # in (0, 100)
    max_ms: float  # > 0

    @property
    def label(self) -> str:
        """`tpot p90`, `ttft p99.9`: how a table names the objective."""
        return f"{self.figure.removesuffix('_ms')} p{self.percentile:g}"

    def to_dict(self) -> dict[str, float]:
        return {"percentile": self.percentile, "max": self.max_ms}


@dataclass(frozen=True)
class Slo:
    """The objectives a point must meet (in FIGURES order), and the fraction of requests that
    must meet every one of them (None: no attainment target), below 1: an attainment of 1 can
    never pass (no finite run shows that every request, ever, meets the goal), so it is
    refused."""

    objectives: tuple[Objective, ...]
    attainment: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """As the config spells it (a canonical param: a changed goal changes it)."""
        out: dict[str, Any] = {o.figure: o.to_dict() for o in self.objectives}
        if self.attainment is not None:
            out[ATTAINMENT] = self.attainment
        return out

    @property
    def text(self) -> str:
        """`tpot p90 <= 52 ms, ttft p99 <= 2000 ms, attainment >= 0.9`."""
        parts = [f"{o.label} ≤ {o.max_ms:g} ms" for o in self.objectives]
        if self.attainment is not None:
            parts.append(f"attainment ≥ {self.attainment:g}")
        return ", ".join(parts)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Slo:
        """A goal as `to_dict` wrote it (the project's own goal file; checked when the config was
        read, so not again)."""
        objectives = tuple(
            Objective(figure, float(data[figure]["percentile"]), float(data[figure]["max"]))
            for figure in FIGURES
            if figure in data
        )
        attainment = data.get(ATTAINMENT)
        return cls(objectives, None if attainment is None else float(attainment))

    @classmethod
    def from_config(cls, mapping: Any, where: str) -> Slo:
        """The goal a config's `slo` mapping states; `where` is its key path
        (`workloads.w.slo`). Raises ConfigError naming the first key that cannot be run."""
        if not isinstance(mapping, Mapping):
            raise ConfigError(f"config key '{where}': a mapping of objectives, not {mapping!r}")
        for key in mapping:
            if key not in FIGURES and key != ATTAINMENT:
                raise ConfigError(
                    f"config key '{where}.{key}': not a latency figure; an objective is one of "
                    f"{', '.join(FIGURES)} (and '{ATTAINMENT}' a target fraction)"
                )
        objectives = tuple(
            _objective(figure, mapping[figure], f"{where}.{figure}")
            for figure in FIGURES
            if figure in mapping
        )
        if not objectives:
            raise ConfigError(
                f"config key '{where}': names no objective (give one of {', '.join(FIGURES)})"
            )
        attainment = None
        if ATTAINMENT in mapping:
            attainment = _number(mapping[ATTAINMENT], f"{where}.{ATTAINMENT}")
            if not 0.0 < attainment < 1.0:
                raise ConfigError(
                    f"config key '{where}.{ATTAINMENT}': {attainment:g} is not in (0, 1): it is "
                    "the fraction of requests that must meet every objective, and 1 can never "
                    "pass (no finite run shows that every request, ever, meets the goal)"
                )
        return cls(objectives, attainment)


def _objective(figure: str, entry: Any, where: str) -> Objective:
    if not isinstance(entry, Mapping):
        raise ConfigError(
            f"config key '{where}': a mapping {{percentile: P, max: LIMIT}}, not {entry!r}"
        )
    for key in entry:
        if key not in OBJECTIVE_KEYS:
            raise ConfigError(
                f"config key '{where}.{key}': unknown; an objective takes "
                f"{' and '.join(OBJECTIVE_KEYS)}"
            )
    for key in OBJECTIVE_KEYS:
        if key not in entry:
            raise ConfigError(f"config key '{where}.{key}': missing")
    percentile = _number(entry["percentile"], f"{where}.percentile")
    if not 0.0 < percentile < 100.0:
        raise ConfigError(
            f"config key '{where}.percentile': {percentile:g} is not in (0, 100) "
            "(a median is 50; the largest value is no percentile a run can bound)"
        )
    limit = _number(entry["max"], f"{where}.max")
    if limit <= 0.0:
        raise ConfigError(f"config key '{where}.max': {limit:g} ms is not a positive limit")
    return Objective(figure, percentile, limit)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"config key '{where}': {value!r} is not a finite number")
    return float(value)
