"""Per-cell metrics -> the summary table (every cell of the matrix, failed and blocked too, with
intervals and checks), the seeds' index view, and published reference figures beside the
measured ones. Pure functions of the records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ..loadgen.metrics import send_lag_note, sent_late
from ..loadgen.request_table import RequestTable
from ..process.machine_use import attempts_note, client_note, disturbed, interference_note
from ..process.memory import understates_note
from ..vocabulary import IDENTITY_COLUMNS, Cell, CellMetrics, Status, identity
from .compact import (
    CONVERSATION_COLUMNS,
    NOT_RUN,
    REF_PREFIX,
    completed_text,
    first_line,
    is_missing,
    number_text,
    peak_mem_gib,
    summary_row,
)
from .energy.cost import COST_COLUMNS, cell_cost
from .energy.view import ENERGY_COLUMNS
from .labels import context_tokens, engine_label
from .search.cells import SLO_COLUMNS, slo_columns
from .stability import Stability, stability
from .stats import (
    FIGURES,
    MIN_REPEATS,
    RequestArrays,
    as_columns,
    bootstrap_intervals,
    interval_from_repeats,
    request_arrays,
)

COUNT_COLUMNS = [
    "concurrency",
    "num_prompts",
    "completed",
    "errors",
    "incomplete",
    *CONVERSATION_COLUMNS,
]


SUMMARY_COLUMNS = [
    "cell",
    *IDENTITY_COLUMNS,
    "concurrency",
    "num_prompts",
    "status",
    "completed",
    "errors",
    "incomplete",
    "prefill_tok_s",
    "decode_tok_s",
    "req_per_s",
    "ttft_median_ms",
    "tpot_median_ms",
    "itl_median_ms",
    "e2el_median_ms",
    "peak_mem_gib",
    "acceptance_rate",
    "acceptance_length",
    "hit_time_cap",
    "duration_s",
    "synthetic",
    "reason",
]


# Added after the `ref_*` columns, so every earlier column keeps its place in summary.csv.
# Each headline figure's 95 % interval (workflow_scripts.outputs.stats) follows as
# `<figure>_lo/_hi`.
INTERVAL_FIGURES = [
    "decode_tok_s",
    "prefill_tok_s",
    "req_per_s",
    "ttft_median_ms",
    "ttft_p99_ms",
    "tpot_median_ms",
    "tpot_p99_ms",
    "e2el_median_ms",
    "peak_mem_gib",
    "acceptance_rate",
    "acceptance_length",
]


# The server's own resident memory beside peak_mem_gib (the MemAvailable drop), and whether that
# drop understates it (metrics.json `mem`, process.memory).
MEMORY_COLUMNS = ["server_anon_peak_gib", "server_file_peak_gib", "mem_delta_understates"]


# An open-loop cell's TTFT and E2E from each request's scheduled time (beside the contract's
# from the send), its send lag, and whether that passed the stated share of its TTFT
# (loadgen.metrics.send_lag_check); empty for a closed loop.
SCHEDULE_COLUMNS = [
    "ttft_from_schedule_median_ms",
    "ttft_from_schedule_p99_ms",
    "e2el_from_schedule_median_ms",
    "e2el_from_schedule_p99_ms",
    "send_lag_p50_ms",
    "send_lag_p99_ms",
    "send_lag_flagged",
]


LATER_COLUMNS = [
    "build_variant",
    "interval_source",
    "interval_n",
    "ttft_p99_ms",
    "tpot_p99_ms",
    *[f"{name}_{end}" for name in INTERVAL_FIGURES for end in ("lo", "hi")],
    "repeats",
    "stability_first_tok_s",
    "stability_last_tok_s",
    "unstable",
    "client_processes",
    "client_cpu_percent_of_core",
    "client_max_process_percent_of_core",
    "client_limited",
    "other_cpu_percent_of_core",
    "other_mem_rise_gib",
    "interference",
    "server_rss_peak_gib",
    *SLO_COLUMNS,  # latency goals and the tail note (outputs.search.cells)
    "disturbed",  # other work on the machine during the bench (process.machine_use.disturbed)
    *MEMORY_COLUMNS,
    "prefix_cache_hit_pct",  # prompt tokens the engine's prefix cache served (empty: not reported)
    "prefix_cache",  # on | off: the engine's settings let it serve prompts from its cache
    "content",  # what the prompts are: chat, conversation, code, random tokens, ...
    *CONVERSATION_COLUMNS,  # a conversation cell's counts (metrics.json conversations, turns)
    *SCHEDULE_COLUMNS,  # open-loop loads: latency from the schedule, the send lag and its flag
    "slo_latency_from",  # where the goal's TTFT and E2E ran from (outputs.search.cells)
    *ENERGY_COLUMNS,  # metrics.json `energy`: J per output token, or not measured and why
    *COST_COLUMNS,  # dollars per million output tokens and its basis; empty without a price
]


# Published figures sit in their own `ref_*` columns, named after the measured column they match.
REFERENCE_KEYS = [
    "decode_tok_s",
    "prefill_tok_s",
    "ttft_median_ms",
    "tpot_median_ms",
    "peak_mem_gib",
    "completed",
    "note",
]


INDEX_COLUMNS = [
    "Configuration",
    "Engine (+speculative)",
    "Quant",
    "Ctx",
    "Conc",
    "Decode tok/s",
    "Status",
    "Completed",
]


INDEX_REFERENCE_COLUMN = "Decode tok/s (published)"


def identity_from_cell(cell: Cell) -> dict[str, Any]:
    """A metrics-shaped stub for a cell with no measurement (reference-only, or not run yet):
    its identity as metrics.json has it, and why it has no figures."""
    return {
        **identity(cell),
        "status": Status.BLOCKED if cell.blocked else NOT_RUN,
        "reason": cell.blocked or "",
    }


def reference_columns(references: Sequence[Mapping[str, Any]]) -> list[str]:
    """The fixed `ref_*` columns, then any other published key a config attached, sorted."""
    extra = sorted({k for ref in references for k in ref} - set(REFERENCE_KEYS))
    return [REF_PREFIX + k for k in [*REFERENCE_KEYS, *extra]]


def _cells_by_id(cells: Sequence[Cell] | None) -> dict[str, Cell]:
    return {cell.id: cell for cell in cells or []}


def merge_with_cells(
    all_metrics: Sequence[CellMetrics], cells: Sequence[Cell] | None
) -> list[Mapping[str, Any]]:
    """Metrics of the config's cells in config order; a cell with none gets an identity stub."""
    by_cell = {m["cell"]: m for m in all_metrics}
    if not cells:
        return list(all_metrics)
    ordered = [by_cell.get(cell.id) or identity_from_cell(cell) for cell in cells]
    known = {cell.id for cell in cells}
    return ordered + [m for m in all_metrics if m["cell"] not in known]


def interval_columns(metrics: CellMetrics, requests: RequestTable | None) -> dict[str, Any]:
    """A done cell's p99 figures, the 95 % interval of each headline figure
    (`figure_intervals`) and whether its run was steady, from its requests' table."""
    if metrics.get("status") != Status.DONE:
        return {}
    if requests is None or not requests.rows:
        return figure_intervals(metrics, None)
    arrays = request_arrays(requests)  # once, for the intervals and the stability check
    return {**figure_intervals(metrics, arrays), **stability_columns(stability(requests, arrays))}


def figure_intervals(
    metrics: CellMetrics,
    arrays: RequestArrays | None,
    figures: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A done cell's p99 figures and the 95 % interval of each headline figure (or of those
    named): a t-interval from its repeats when ≥ 3 finished, else a bootstrap over its requests
    (`arrays`, None without records) when it ran once (two repeats: none). Figures with no
    per-request basis (memory, acceptance) get an interval only from repeats."""
    if metrics.get("status") != Status.DONE:
        return {}
    row: dict[str, Any] = {
        "ttft_p99_ms": (metrics.get("ttft_ms") or {}).get("p99"),
        "tpot_p99_ms": (metrics.get("tpot_ms") or {}).get("p99"),
    }
    repeats = metrics.get("repeats")
    if repeats:
        row["repeats"] = repeats["done"]
    if repeats and repeats["done"] >= MIN_REPEATS:
        for name in INTERVAL_FIGURES if figures is None else figures:
            interval = interval_from_repeats([f.get(name) for f in repeats["figures"]])
            if interval is not None:
                row[f"{name}_lo"], row[f"{name}_hi"] = interval.lo, interval.hi
        row["interval_source"] = "repeats"
        row["interval_n"] = repeats["done"]
    elif arrays is not None and not (repeats and repeats["done"] > 1):
        per_request = None if figures is None else [f for f in figures if f in FIGURES]
        intervals = bootstrap_intervals(arrays, figures=per_request)
        row.update(as_columns(intervals))
        row["interval_source"] = "bootstrap"
        row["interval_n"] = next(iter(intervals.values())).n
    return row


def stability_columns(found: Stability | None) -> dict[str, Any]:
    """Decode tok/s of the first and last tenth of the requests, and whether they differ beyond
    their intervals (of the first finished repeat, with repeats); nothing under 20 requests."""
    if found is None:
        return {}
    return {
        "stability_first_tok_s": found.first.value,
        "stability_last_tok_s": found.last.value,
        "unstable": found.flagged,
        "stability_note": found.note(),
    }


def check_columns(metrics: CellMetrics) -> dict[str, Any]:
    """The client's CPU use and what else used the machine during the bench (metrics.json's
    `client` and `interference`), each with its flag and, when flagged, a note."""
    client, other = metrics.get("client"), metrics.get("interference")
    row: dict[str, Any] = {}
    if client:
        row.update(
            {
                "client_processes": client.get("processes"),
                "client_cpu_percent_of_core": client.get("cpu_percent_of_core"),
                "client_max_process_percent_of_core": client.get("max_process_percent_of_core"),
                "client_limited": client.get("limited"),
                "client_note": client_note(client),
            }
        )
    if other:
        note = interference_note(other)
        row.update(
            {
                "other_cpu_percent_of_core": other.get("other_cpu_percent_of_core"),
                "other_mem_rise_gib": other.get("other_mem_rise_gib"),
                "interference": other.get("flagged"),
                "interference_note": note + attempts_note(metrics) if note else "",
                "disturbed": disturbed(metrics),
            }
        )
    return row


def schedule_columns(metrics: CellMetrics) -> dict[str, Any]:
    """SCHEDULE_COLUMNS from metrics.json, with a note when the send lag is flagged."""
    row: dict[str, Any] = {}
    for figure in ("ttft", "e2el"):
        found = metrics.get(f"{figure}_from_schedule_ms") or {}
        row[f"{figure}_from_schedule_median_ms"] = found.get("median")
        row[f"{figure}_from_schedule_p99_ms"] = found.get("p99")
    lag = metrics.get("send_lag_ms") or {}
    row["send_lag_p50_ms"], row["send_lag_p99_ms"] = lag.get("p50"), lag.get("p99")
    row["send_lag_flagged"] = sent_late(metrics)
    row["send_lag_note"] = send_lag_note(metrics)
    return row


def memory_columns(metrics: CellMetrics) -> dict[str, Any]:
    """The server tree's anonymous and file-backed RSS peaks, and whether the MemAvailable drop
    shown as `peak_mem_gib` understates them, with a note saying why when it does."""
    mem = metrics.get("mem") or {}
    return {
        "server_anon_peak_gib": mem.get("server_rss_anon_peak_gib"),
        "server_file_peak_gib": mem.get("server_rss_file_peak_gib"),
        "mem_delta_understates": mem.get("delta_understates"),
        "mem_note": understates_note(mem, peak_mem_gib(mem)),
    }


def _reference(cell: Cell | None) -> dict[str, Any] | None:
    return cell.reference if cell is not None else None


def summary_rows(
    all_metrics: Sequence[CellMetrics],
    cells: Sequence[Cell] | None = None,
    requests: Mapping[str, RequestTable] | None = None,
    prices: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One row per cell; `cells` adds cells with no metrics and their references; the cells'
    `requests` (each one's table, by id) add each figure's interval; `prices` (by cell: config
    `cost`) each cell's dollars per million output tokens."""
    by_id = _cells_by_id(cells)
    requests, prices = requests or {}, prices or {}
    return [
        {
            **summary_row(metrics, _reference(by_id.get(metrics["cell"]))),
            **interval_columns(metrics, requests.get(metrics["cell"])),
            **check_columns(metrics),
            **memory_columns(metrics),
            **slo_columns(metrics),
            **schedule_columns(metrics),
            **cell_cost(metrics, prices.get(metrics["cell"])).columns(),
        }
        for metrics in merge_with_cells(all_metrics, cells)
    ]


def summary_frame(
    rows: Sequence[Mapping[str, Any]], cells: Sequence[Cell] | None = None
) -> pd.DataFrame:
    """Summary rows -> summary.csv's frame: the fixed columns, `ref_*`, then later additions."""
    references = [cell.reference for cell in cells or []]
    columns = SUMMARY_COLUMNS + reference_columns(references) + LATER_COLUMNS
    frame = pd.DataFrame(rows, columns=columns)
    # Counts stay integers when some cells (failed, blocked) have none.
    for column in [*COUNT_COLUMNS, "interval_n", "repeats", "client_processes"]:
        frame[column] = frame[column].astype("Int64")
    return frame


def summary_table(
    all_metrics: Sequence[CellMetrics],
    cells: Sequence[Cell] | None = None,
    requests: Mapping[str, RequestTable] | None = None,
) -> pd.DataFrame:
    """Every column of every cell: summary.csv."""
    return summary_frame(summary_rows(all_metrics, cells, requests), cells)


def status_text(status: str | None, reason: str | None) -> str:
    reason = first_line(reason, 160)
    return f"{status}: {reason}" if reason and status != Status.DONE else str(status)


def index_table(
    summary: pd.DataFrame,
    cells: Sequence[Cell] | None = None,
    card_links: str | None = None,
) -> pd.DataFrame:
    """The seeds' index view. `card_links` is the path prefix from the table to the cells'
    directories (e.g. `../cells`): the Configuration column then links each card."""
    by_id = _cells_by_id(cells)
    with_reference = (
        REF_PREFIX + "decode_tok_s" in summary
        and summary[REF_PREFIX + "decode_tok_s"].map(lambda v: not is_missing(v)).any()
    )
    rows = []
    for row in summary.to_dict("records"):
        cell = by_id.get(row["cell"])  # None: a result of a cell the config no longer has
        name = row["cell"]
        entry = {
            "Configuration": f"[{name}]({card_links}/{name}/card.md)" if card_links else name,
            "Engine (+speculative)": engine_label(cell) if cell else row["engine"],
            "Quant": row["quant"],
            "Ctx": (context_tokens(cell) if cell else None) or "",
            "Conc": row["concurrency"],
            "Decode tok/s": (
                number_text(row["decode_tok_s"]) if row["status"] == Status.DONE else ""
            ),
            "Status": status_text(row["status"], row.get("reason")),
            "Completed": completed_text(row),
        }
        if with_reference:
            entry[INDEX_REFERENCE_COLUMN] = number_text(row.get(REF_PREFIX + "decode_tok_s"))
        rows.append(entry)
    columns = INDEX_COLUMNS + ([INDEX_REFERENCE_COLUMN] if with_reference else [])
    return pd.DataFrame(rows, columns=columns)


def blocked_text(cell: Cell) -> str:
    return f"{Status.BLOCKED}: {first_line(cell.blocked)}" if cell.blocked else ""


def reference_table(cells: Sequence[Cell]) -> pd.DataFrame:
    """The published figures of a config's cells, one row per cell that has any (or is
    blocked), in their own table: what a reference-only summary lists."""
    references = [cell.reference for cell in cells]
    used = {key for reference in references for key in reference}
    keys = [c[len(REF_PREFIX) :] for c in reference_columns(references)]
    keys = [key for key in keys if key in used]
    rows = []
    for cell, reference in zip(cells, references, strict=True):
        if not reference and not cell.blocked:
            continue
        rows.append(
            {
                "cell": cell.id,
                "engine (+speculative)": engine_label(cell),
                "quant": cell.quant,
                "concurrency": cell.concurrency,
                "status": blocked_text(cell),
                **{key: reference.get(key) for key in keys},
            }
        )
    columns = ["cell", "engine (+speculative)", "quant", "concurrency", "status", *keys]
    return pd.DataFrame(rows, columns=columns)
