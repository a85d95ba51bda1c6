"""sweeps.csv: one row per point of every series, with its figures and intervals (a cell's
repeats already folded in: repeats.collapse_repeats), failed, blocked and not-run points too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ...loadgen.request_table import RequestTable
from ...process.machine_use import disturbed
from ...vocabulary import (
    IDENTITY_COLUMNS,
    Cell,
    CellMetrics,
    Status,
    identity_columns,
    point_part,
    point_value,
)
from ..compact import is_missing, summary_row
from ..energy.cost import COST_COLUMNS, cell_cost
from ..stats import arrays_of
from ..tables import SCHEDULE_COLUMNS, figure_intervals, merge_with_cells, schedule_columns

# A point's energy, as the summary has it (outputs/energy/view.py).
POINT_ENERGY_COLUMNS = [
    "j_per_output_token",
    "output_tokens_per_j",
    "j_above_idle_per_output_token",
    "idle_w",
    "energy_status",
    "energy_note",
]

# sweeps.csv: the contract's columns first, then what a reader needs to trust them.
SWEEP_FIGURES = [
    "decode_tok_s",
    "interactivity_tok_s",
    "tpot_median_ms",
    "tpot_p99_ms",
    "ttft_median_ms",
    "ttft_p99_ms",
    "req_per_s",
    "decode_tok_s_per_gpu",
]
# What names a point in every sweep table: its cell, its series, and its load on the series' axis.
POINT_COLUMNS = ["cell", "series", "axis", "concurrency", "request_rate", "point"]
SWEEP_COLUMNS = [
    *POINT_COLUMNS,
    "status",
    *SWEEP_FIGURES,
    "completed",
    "errors",
    "gpus",
    *[f"{name}_{end}" for name in SWEEP_FIGURES for end in ("lo", "hi")],
    "interval_source",
    "interval_n",
    "server_start",
    "server_start_position",
    *IDENTITY_COLUMNS,
    "reason",
    "disturbed",  # other work on the machine during the point's bench (machine_use.disturbed)
    # open-loop points: latency from each request's scheduled time, the send lag and its flag
    *SCHEDULE_COLUMNS,
    # what a token costs at the point (metrics.json `energy`; dollars where a price is given)
    *POINT_ENERGY_COLUMNS,
    *COST_COLUMNS,
]

# The figures a point's row takes from its metrics, each with its interval.
MEASURED = [
    "decode_tok_s",
    "tpot_median_ms",
    "tpot_p99_ms",
    "ttft_median_ms",
    "ttft_p99_ms",
    "req_per_s",
]


def sweep_points(cells: Sequence[Cell]) -> list[Cell]:
    """The points of every series, each series together in the config's order, its points by
    load (a series' points may be listed in any order)."""
    cells = [cell for cell in cells if cell.sweep is not None]
    first = {}
    for i, cell in enumerate(cells):
        first.setdefault(cell.sweep.series, i)
    return sorted(cells, key=lambda c: (first[c.sweep.series], c.sweep.value))


def _reciprocal(value: Any) -> float | None:
    return None if is_missing(value) or value <= 0 else 1000.0 / value


def _per(value: Any, gpus: int | None) -> float | None:
    return None if is_missing(value) or not gpus else value / gpus


def point_row(
    cell: Cell,
    row: Mapping[str, Any],
    metrics: CellMetrics,
    gpus: int | None,
    price: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """One sweeps.csv row from the point's summary row and intervals (as the summary has them:
    tables.summary_row, tables.figure_intervals). A point that did not finish keeps its status
    and reason, no figures. Interactivity is 1000 / TPOT median, so its interval is the TPOT
    median's, inverted. `price`: the point's (config `cost`), for its dollars per million
    output tokens."""
    sweep = cell.sweep
    server = metrics.get("server_start") or {}
    out: dict[str, Any] = {
        "cell": cell.id,
        "series": sweep.series,
        "axis": sweep.axis,
        "concurrency": cell.concurrency,
        "request_rate": cell.workload_spec.request_rate,
        "point": point_part("", sweep.axis, sweep.value),
        "status": row.get("status"),
        "gpus": gpus or None,
        "server_start": server.get("id"),
        "server_start_position": server.get("position"),
        **identity_columns(cell),
        "reason": row.get("reason") or "",
        "disturbed": disturbed(metrics),
    }
    out[sweep.axis] = point_value(sweep.axis, sweep.value)
    if row.get("status") != Status.DONE:
        return out
    for key in ("completed", "errors", "interval_source", "interval_n"):
        out[key] = row.get(key)
    for name in MEASURED:
        for suffix in ("", "_lo", "_hi"):
            out[name + suffix] = row.get(name + suffix)
    out.update({k: v for k, v in schedule_columns(metrics).items() if k in SCHEDULE_COLUMNS})
    out["interactivity_tok_s"] = _reciprocal(row.get("tpot_median_ms"))
    out["interactivity_tok_s_lo"] = _reciprocal(row.get("tpot_median_ms_hi"))
    out["interactivity_tok_s_hi"] = _reciprocal(row.get("tpot_median_ms_lo"))
    for suffix in ("", "_lo", "_hi"):
        out["decode_tok_s_per_gpu" + suffix] = _per(row.get("decode_tok_s" + suffix), gpus)
    out.update({key: row.get(key) for key in POINT_ENERGY_COLUMNS})
    out.update(cell_cost(metrics, price).columns())
    return out


def sweep_table(
    all_metrics: Sequence[CellMetrics],
    cells: Sequence[Cell],
    requests: Mapping[str, RequestTable] | None = None,
    gpus: Mapping[str, int | None] | None = None,
    prices: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """sweeps.csv: one row per point of every series, failed, blocked and not-run points too.
    `requests`: each point's requests' table; `gpus`: each cell's `resources.gpu` (0 or
    absent: no per-GPU figure); `prices` each cell's price or None."""
    points = sweep_points(cells)
    ids = {cell.id for cell in points}
    metrics = [m for m in all_metrics if m["cell"] in ids]
    by_id = {m["cell"]: m for m in metrics}
    requests, gpus, prices = requests or {}, gpus or {}, prices or {}
    out = []
    for cell, merged in zip(points, merge_with_cells(metrics, points), strict=True):
        arrays = arrays_of(requests.get(cell.id))
        row = {**summary_row(merged), **figure_intervals(merged, arrays, MEASURED)}
        found = by_id.get(cell.id, {})
        out.append(point_row(cell, row, found, gpus.get(cell.id), prices.get(cell.id)))
    frame = pd.DataFrame(out, columns=SWEEP_COLUMNS)
    for column in ("concurrency", "completed", "errors", "gpus", "interval_n"):
        frame[column] = frame[column].astype("Int64")
    frame["server_start_position"] = frame["server_start_position"].astype("Int64")
    return frame
