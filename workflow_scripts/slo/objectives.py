"""A workload's latency goal (`workloads.<w>.slo`): objectives, each a latency figure, a
percentile and a limit, and an optional attainment target. The config schema refuses a goal that
cannot mean anything, naming the key, before anything runs; here it is only read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The figures an objective may bound (the schema's `slo` keys): metrics.json's names, each a
# per-request latency in ms.
FIGURES = ("ttft_ms", "tpot_ms", "e2el_ms")
ATTAINMENT = "attainment"


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
    never pass (no finite run shows that every request, ever, meets the goal), so the schema
    refuses it."""

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
        """A goal as the config states it (checked by its schema) or as `to_dict` wrote it (the
        project's own goal file): numbers as floats, objectives in FIGURES order."""
        objectives = tuple(
            Objective(figure, float(data[figure]["percentile"]), float(data[figure]["max"]))
            for figure in FIGURES
            if figure in data
        )
        attainment = data.get(ATTAINMENT)
        return cls(objectives, None if attainment is None else float(attainment))
