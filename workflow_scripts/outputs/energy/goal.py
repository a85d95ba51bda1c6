"""The latency goal's tables' energy: what a token costs at the largest load that passes the
goal (slo.csv: the probe the answer rests on), in joules and, where a price is given, dollars;
and the drafter at the goal against its base at theirs (slo_drafter.csv: each at the load it
serves within the goal, change.energy_change)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...vocabulary import Status
from .change import energy_change
from .cost import COST_COLUMNS, cell_cost
from .view import energy_columns

SLO_ENERGY_COLUMNS = ["j_per_output_token", "output_tokens_per_j", "energy_note", *COST_COLUMNS]
DRAFTER_GOAL_ENERGY_COLUMNS = [
    "base_j_per_output_token",
    "drafter_j_per_output_token",
    "energy_change_pct",
    "energy_change_lo_pct",
    "energy_change_hi_pct",
    "energy_verdict",
    "energy_note",
]


def _as_metrics(energy: Mapping[str, Any] | None, decode_tok_s: float | None) -> dict[str, Any]:
    """A probe as the energy figures read a cell: done, its output tok/s and its `energy`."""
    out: dict[str, Any] = {"status": Status.DONE, "decode_tok_s": decode_tok_s}
    if energy is not None:
        out["energy"] = energy
    return out


def answer_columns(
    energy: Mapping[str, Any] | None,
    decode_tok_s: float | None,
    price: Mapping[str, float] | None,
    answered: bool,
) -> dict[str, Any]:
    """slo.csv's energy at the answer (`answered`: a load passes), from its probe's `energy`
    and decode tok/s; nothing where no load passes."""
    if not answered:
        return {}
    metrics = _as_metrics(energy, decode_tok_s)
    columns = energy_columns(metrics)
    return {
        **{key: columns[key] for key in ("j_per_output_token", "output_tokens_per_j")},
        "energy_note": columns["energy_note"],
        **cell_cost(metrics, price).columns(),
    }


def drafter_goal_columns(
    base: Mapping[str, Any] | None, drafter: Mapping[str, Any] | None
) -> dict[str, Any]:
    """slo_drafter.csv's energy: each series' probe at its answer (`energy`; None: no load
    passes), and the drafter's change against its base there."""
    if base is None or drafter is None:
        return {}
    found = energy_change(_as_metrics(base, None), _as_metrics(drafter, None)).columns()
    return {key: found[key] for key in DRAFTER_GOAL_ENERGY_COLUMNS}
