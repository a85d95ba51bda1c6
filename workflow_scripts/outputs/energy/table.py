"""summary/energy.csv and .md: one row per cell and sweep point (repeats folded in), what its
tokens cost in energy: the source and how it was read, the devices, the window, the joules
gross and above the idle draw, the power, each per-token figure, the steady state's with its
interval, the counter's cross-check, what disturbed it, or `not measured` with the reason; and
dollars per million output tokens where a price is given (cost.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ...atomic import write_text
from ...vocabulary import ENERGY_MEASURED
from ..compact import is_missing, number_text
from ..stats import interval_from_repeats
from ..tables import SUMMARY_COLUMNS
from ..writers import to_markdown
from .cost import COST_COLUMNS, Cost, basis_text, cell_cost
from .view import devices_text, energy_columns, measured, not_measured_lines

IDENTITY = SUMMARY_COLUMNS[: SUMMARY_COLUMNS.index("workload") + 1]
# The figures of metrics.json `energy` a row takes as they are (docs/metrics.md, "Energy").
FIGURES = [
    "joules",
    "error_j",
    "idle_w",
    "joules_above_idle",
    "mean_w",
    "peak_w",
    "output_tokens",
    "prompt_tokens",
    "j_per_output_token",
    "output_tokens_per_j",
    "j_per_token",
    "tokens_per_j",
    "j_above_idle_per_output_token",
    "resolution_j",
    "client_cpu_share_pct",
    "valid",
    "disturbed",
]
ENERGY_TABLE_COLUMNS = [
    *IDENTITY,
    "concurrency",
    "status",
    "energy_status",
    "source",
    "method",
    "devices",
    "window_s",
    "window_start_s",
    "window_end_s",
    "idle_window_s",
    *FIGURES,
    "j_per_output_token_lo",  # across repeats (≥ 3), where the cell has them
    "j_per_output_token_hi",
    "repeats",
    "steady_window_s",
    "steady_j_per_output_token",
    "steady_j_per_output_token_lo",  # its time slices resampled (energy/interval.py)
    "steady_j_per_output_token_hi",
    "steady_slices",
    "steady_note",  # why no steady state or no interval
    "cross_check_pct",  # power samples against the counter, % of the counter's joules
    "cross_check_within_error",
    "note",  # what the joules cover, what disturbed them, or not measured: why
    *COST_COLUMNS,
]


def _duration(window: Mapping[str, Any] | None) -> float | None:
    return (window or {}).get("duration_s")


def steady_columns(energy: Mapping[str, Any]) -> dict[str, Any]:
    steady = energy.get("steady") or {}
    interval = steady.get("interval") or {}
    return {
        "steady_window_s": _duration(steady.get("window")),
        "steady_j_per_output_token": steady.get("j_per_output_token"),
        "steady_j_per_output_token_lo": interval.get("lo"),
        "steady_j_per_output_token_hi": interval.get("hi"),
        "steady_slices": interval.get("slices"),
        "steady_note": energy.get("steady_reason") or interval.get("reason"),
    }


def repeats_columns(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """J per output token's interval across the cell's repeats (≥ 3 measured)."""
    repeats = metrics.get("repeats") or {}
    if not repeats:
        return {}
    values = [f.get("j_per_output_token") for f in repeats.get("figures", ())]
    found = interval_from_repeats(values)
    out: dict[str, Any] = {"repeats": repeats.get("done")}
    if found is not None:
        out["j_per_output_token_lo"], out["j_per_output_token_hi"] = found.lo, found.hi
    return out


def energy_row(metrics: Mapping[str, Any], price: Mapping[str, float] | None) -> dict[str, Any]:
    """One cell's row: its energy figures where they were read, its note either way."""
    shown = energy_columns(metrics)  # the summary's words for the same record
    row: dict[str, Any] = {
        **{key: metrics.get(key) for key in [*IDENTITY, "concurrency", "status"]},
        "energy_status": shown["energy_status"],
        "source": shown["energy_source"],
        "note": shown["energy_note"],
        **cell_cost(metrics, price).columns(),
    }
    if not measured(metrics):
        return row
    energy = metrics["energy"]
    cross = energy.get("cross_check") or {}
    window = energy.get("window") or {}
    row.update(
        {
            "method": energy.get("method"),
            "devices": devices_text(energy),
            "window_s": window.get("duration_s"),
            "window_start_s": window.get("start_s"),
            "window_end_s": window.get("end_s"),
            "idle_window_s": _duration(energy.get("idle_window")),
            **{key: energy.get(key) for key in FIGURES},
            **repeats_columns(metrics),
            **steady_columns(energy),
            "cross_check_pct": cross.get("difference_pct"),
            "cross_check_within_error": cross.get("within_error"),
        }
    )
    return row


def energy_table(
    all_metrics: Sequence[Mapping[str, Any]], prices: Mapping[str, Any] | None = None
) -> pd.DataFrame:
    """energy.csv: a row per cell (the summary's cells and order, repeats folded in); `prices`
    each cell's price or None (config.energy.prices_by_cell)."""
    prices = prices or {}
    rows = [energy_row(m, prices.get(m["cell"])) for m in all_metrics]
    frame = pd.DataFrame(rows, columns=ENERGY_TABLE_COLUMNS)
    for column in ("concurrency", "repeats", "steady_slices"):
        frame[column] = frame[column].astype("Int64")
    return frame


def _with(row: Mapping[str, Any], column: str, digits: int) -> str:
    """`column`'s figure with its interval (`<column>_lo`, `_hi`) where it has one."""
    lo, hi = row[f"{column}_lo"], row[f"{column}_hi"]
    text = number_text(row[column], digits)
    if text and not (is_missing(lo) or is_missing(hi)):
        text += f" [{number_text(lo, digits)}, {number_text(hi, digits)}]"
    return text


def energy_view(table: pd.DataFrame) -> pd.DataFrame:
    """energy.md: the figures a reader compares, the dollar columns only where a cell is
    priced."""
    priced = table["cost_basis"].map(lambda v: not is_missing(v)).any()
    rows = []
    for row in table.to_dict("records"):
        shown = {
            "cell": row["cell"],
            "energy": " · ".join(
                str(v)
                for v in (row["energy_status"], row["source"], row["method"])
                if not is_missing(v)
            ),
            "J/output token": _with(row, "j_per_output_token", 4),
            "output tokens/J": number_text(row["output_tokens_per_j"], 2),
            "J/token (prompt + output)": number_text(row["j_per_token"], 4),
            "J above idle/output token": number_text(row["j_above_idle_per_output_token"], 4),
            "steady J/output token [95 %]": _with(row, "steady_j_per_output_token", 4),
            "idle W": number_text(row["idle_w"], 1),
            "mean W": number_text(row["mean_w"], 1),
            "peak W": number_text(row["peak_w"], 1),
            "window s": number_text(row["window_s"], 2),
            "cross-check %": number_text(row["cross_check_pct"], 1),
        }
        if priced:
            shown["$/M output tokens"] = number_text(row["usd_per_m_output_tokens"], 4)
            shown["basis"] = basis_text_of(row)
        shown["note"] = row["note"] or ""
        rows.append(shown)
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["cell"])


def basis_text_of(row: Mapping[str, Any]) -> str:
    """A row's dollar basis in words (`$3.5/h machine`)."""
    if is_missing(row.get("cost_basis")):
        return ""
    return basis_text(Cost(None, row["cost_basis"], row["cost_price"]))


ENERGY_TITLE = "Energy: what a token costs"
ENERGY_INTRO = (
    "One row per cell and sweep point: the energy the devices serving it drew over its bench "
    'window, read from their own counters (docs/metrics.md, "Energy"). J/output token is '
    "gross (every joule over the window ÷ its output tokens, the idle draw included); J above "
    "idle/output token leaves out the idle draw read before the server started; J/token counts "
    "prompt and output tokens. A GPU's figure is its board energy, a lower bound on the "
    "machine's; a CPU's package counter holds the whole socket, the load client included (its "
    "CPU share in the note). The steady state (every slot busy) has a 95 % interval from its "
    "time slices resampled; [lo, hi] on J/output token is across the cell's repeats. "
    "Cross-check: the power samples' integral against the counter, in % of the counter's."
)


def write_energy(
    all_metrics: Sequence[Mapping[str, Any]],
    prices: Mapping[str, Any] | None,
    out: Mapping[str, str | Path],
) -> pd.DataFrame:
    """energy.csv and energy.md (`out`'s `energy_csv`, `energy_md`) from the collapsed metrics
    in the summary's order; the frame, its intro in `attrs["intro"]` (the HTML page says it
    too)."""
    table = energy_table(all_metrics, prices)
    table.attrs["intro"] = energy_intro(all_metrics, table)
    write_text(out["energy_csv"], table.to_csv(index=False))
    write_text(
        out["energy_md"], to_markdown(energy_view(table), ENERGY_TITLE, table.attrs["intro"])
    )
    return table


def energy_intro(all_metrics: Sequence[Mapping[str, Any]], table: pd.DataFrame) -> str:
    """The intro, with the not-measured reason once where no cell was measured; the dollars'
    basis where a cell is priced."""
    lines = not_measured_lines(
        [
            {"cell": m["cell"], "energy_status": s, "energy_note": n}
            for m, s, n in zip(all_metrics, table["energy_status"], table["note"], strict=True)
        ]
    )
    intro = ENERGY_INTRO
    if table["cost_basis"].map(lambda v: not is_missing(v)).any():
        intro += (
            " $/M output tokens: dollars per million output tokens, on the basis given: a "
            "machine's hourly price over the bench's output tok/s, or the energy's price per kWh "
            "times the gross J/output token (docs/config.md, `cost`)."
        )
    if lines:
        intro = "\n\n".join(["\n".join(f"- {line}" for line in lines), intro])
    if not (table["energy_status"] == ENERGY_MEASURED).any():
        intro += " No cell's energy was measured."
    return intro
