"""The summary tables to disk: metrics.json and requests.jsonl read back, then summary, index and
spec-gain tables written as CSV (every column) and markdown (the compact view), atomically."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..atomic import write_text
from ..loadgen.records import RequestRecord
from ..loadgen.request_table import RequestTable, request_tables
from ..vocabulary import ENERGY_MEASURED, Cell, CellMetrics
from .compact import (
    compact_view,
    is_missing,
    number_text,
)
from .conversations import BY_TURN_INTRO, BY_TURN_TITLE, by_turn_table
from .energy.view import not_measured_lines
from .record_index import CellFiles, load_cell, read_cell_records, read_metrics
from .repeats import collapse_repeats, first_runs
from .spec_gain import (
    GAIN_BY_CONTENT_INTRO,
    GAIN_BY_CONTENT_TITLE,
    gain_by_content,
    spec_gain_table,
)
from .tables import index_table, merge_with_cells, summary_frame, summary_rows


def _display(frame: pd.DataFrame) -> pd.DataFrame:
    shown = frame.copy().astype(object)
    for column in shown.columns:
        shown[column] = shown[column].map(lambda v: "" if is_missing(v) else number_text(v))
    return shown


def to_markdown(frame: pd.DataFrame, title: str, intro: str = "") -> str:
    # disable_numparse: tabulate would otherwise turn "120.00" back into 120
    body = (
        _display(frame).to_markdown(index=False, disable_numparse=True)
        if len(frame)
        else "_no rows_"
    )
    intro = f"{intro}\n\n" if intro else ""
    return f"# {title}\n\n{intro}{body}\n"


def write_table(
    frame: pd.DataFrame, csv_path: str | Path, md_path: str | Path, title: str, intro: str = ""
) -> None:
    write_text(csv_path, frame.to_csv(index=False))
    write_text(md_path, to_markdown(frame, title, intro))


def load_metrics(paths: Sequence[str | Path]) -> list[CellMetrics]:
    return [read_metrics(p) for p in paths]


# What `completed` counts: requests of the prompts planned, or a conversation cell's turns and
# conversations apart (outputs.compact.completed_text).
COMPLETED_NOTE = (
    "Completed: requests answered in full of those planned; for a cell of conversations, turns "
    "and conversations apart (a conversation completes when every turn does; a failed turn "
    "ends its conversation, its later turns not sent)."
)


SUMMARY_INTRO = (
    "The columns a reader compares, one row per cell; summary.csv holds every column (errors, "
    "req/s, ITL and E2E latency, duration, build variant, each published figure as `ref_*`). "
    "(published): a figure attached to the cell in the config, never measured here. A cell that "
    "did not finish shows its reason, not its figures. " + COMPLETED_NOTE
)


INTERVAL_INTRO = (
    "`value ± h`: h is the half-width of the figure's 95 % interval; the interval column says "
    "what it comes from: repeats of the cell (each with its own server start: what another run "
    "would give) or a bootstrap over one run's requests (which requests the run held; not "
    "run-to-run drift)."
)


ENERGY_INTRO = (
    "j_per_output_token: the joules the devices serving the cell drew over its bench window "
    "(gross: the idle draw included) ÷ its output tokens, from their own counters; energy.md "
    "has how each was read and what it covers (a GPU's board energy is a lower bound on the "
    "machine's)."
)
COST_INTRO = (
    "usd_per_m_output_tokens: dollars per million output tokens at the config's price "
    "(`cost`), on the basis summary.csv's cost_basis names: the machine's hour over the bench's "
    "output tok/s (usd_per_hour) or the energy's kWh over its J/output token (usd_per_kwh)."
)


# A row's flag notes and the heading the summary lists the flagged cells under.
FLAG_NOTES = [
    ("stability_note", "Throughput not steady within the run"),
    ("client_note", "The load client may have limited the measurement"),
    ("interference_note", "Other work on the machine during the bench"),
    ("mem_note", "Peak memory (the MemAvailable drop) below what the server holds"),
    ("send_lag_note", "Open-loop arrivals sent late (they waited for a free slot)"),
]


def summary_intro(
    all_metrics: Sequence[CellMetrics], rows: Sequence[Mapping[str, Any]] = ()
) -> str:
    """The summary's intro, plus a line per cell whose acceptance figures the time cap put out
    of step with the completed requests (their `spec.cap_note`), and for each flag of
    FLAG_NOTES a line per cell its row carries a note for (throughput drift, a busy client,
    other work on the machine); what the energy and dollar columns are where they show, and why
    energy was not measured where it was not."""
    flagged = [
        f"- `{m['cell']}`: {(m.get('spec') or {})['cap_note']}"
        for m in all_metrics
        if (m.get("spec") or {}).get("cap_note")
    ]
    intro = SUMMARY_INTRO
    if any(r.get("interval_source") for r in rows):
        intro += " " + INTERVAL_INTRO
    if any(r.get("energy_status") == ENERGY_MEASURED for r in rows):
        intro += " " + ENERGY_INTRO
    if any(r.get("cost_basis") for r in rows):
        intro += " " + COST_INTRO
    if flagged:
        intro += "\n\nAcceptance figures to read with care:\n\n" + "\n".join(flagged)
    for key, heading in FLAG_NOTES:
        lines = [f"- `{r['cell']}`: {r[key]}" for r in rows if r.get(key)]
        if lines:
            intro += f"\n\n{heading}:\n\n" + "\n".join(lines)
    if energy := not_measured_lines(rows):  # why no J per output token (energy.md has the rest)
        intro += "\n\n" + "\n".join(f"- {line[0].upper()}{line[1:]}" for line in energy)
    return intro


INDEX_INTRO = (
    "One line per cell. Decode tok/s counts completion tokens of all concurrent requests per "
    "second of the measured run; a column marked (published) holds a reference figure. "
    + COMPLETED_NOTE
)


def write_tables(
    all_metrics: Sequence[CellMetrics],
    cells: Sequence[Cell],
    out: Mapping[str, str | Path],
    card_links: str | None = "../cells",
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
    outputs: Mapping[str, str] | None = None,
    requests: Mapping[str, RequestTable] | None = None,
    prices: Mapping[str, Any] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """summary.{csv,md}, index.{csv,md}, spec_gain.{csv,md} and, where `out` names them,
    by_turn.{csv,md} (conversations) and gain_by_content.{csv,md} to the paths in `out`;
    index.md links each cell's card through `card_links` (None: no cards to link).
    summary.csv holds every column, summary.md the compact view; a cell's repeats make one
    row; `outputs` holds each drafter cell's outputs verdict; `requests` each run's table of
    its `records` (made here when not given); `prices` each cell's price (its dollar
    columns). Returns the summary, compact and spec-gain tables."""
    records = records or {}
    requests = request_tables(records) if requests is None else requests
    requests = first_runs(all_metrics, requests)
    all_metrics, cells, records = collapse_repeats(all_metrics, cells, records)
    rows = summary_rows(all_metrics, cells, requests, prices)  # one bootstrap per cell, both views
    summary = summary_frame(rows, cells)
    headers, compact_rows = compact_view(rows)
    compact = pd.DataFrame(compact_rows, columns=headers)
    write_text(out["summary_csv"], summary.to_csv(index=False))
    compact.attrs["intro"] = summary_intro(all_metrics, rows)  # the HTML twin says the same
    write_text(
        out["summary_md"], to_markdown(compact, "Summary: one row per cell", compact.attrs["intro"])
    )
    write_text(out["index_csv"], index_table(summary, cells).to_csv(index=False))
    intro = INDEX_INTRO + (" Configuration links each cell's result card." if card_links else "")
    write_text(
        out["index_md"],
        to_markdown(index_table(summary, cells, card_links=card_links), "Index", intro),
    )
    ordered = merge_with_cells(all_metrics, cells)
    spec_gain = spec_gain_table(ordered, records, outputs)
    write_table(
        spec_gain,
        out["spec_gain_csv"],
        out["spec_gain_md"],
        "Speculative decoding: each drafter cell beside its base",
    )
    if "by_turn_csv" in out:  # the aggregate rule's; a reference-only table has no runs
        by_turn = by_turn_table(ordered)
        write_table(by_turn, out["by_turn_csv"], out["by_turn_md"], BY_TURN_TITLE, BY_TURN_INTRO)
        points = {cell.id for cell in cells if cell.sweep is not None}
        write_table(
            gain_by_content(spec_gain, points),
            out["gain_by_content_csv"],
            out["gain_by_content_md"],
            GAIN_BY_CONTENT_TITLE,
            GAIN_BY_CONTENT_INTRO,
        )
    return summary, compact, spec_gain


def load_records(paths: Sequence[str | Path]) -> dict[str, list[RequestRecord]]:
    """Each cell's request records, keyed by cell id (the folder name); a file that does not
    parse gives none (load_indexed says why)."""
    out = {}
    for path in paths:
        records = read_cell_records(path)
        out[Path(path).parent.name] = [] if isinstance(records, str) else records
    return out


def load_indexed(
    files: Sequence[CellFiles], requests: bool = True
) -> tuple[list[CellMetrics], dict[str, list[RequestRecord]]]:
    """What a table or figure rule reads: each cell of the records index (`read_index`) as its
    metrics.json and, unless `requests` is false, its request records. The one reader of every
    table, figure and comparison: a result that does not parse or that its own requests.jsonl
    contradicts is a failed cell with the reason there (`checked`), never a row of figures."""
    all_metrics, records = [], {}
    for entry in files:
        metrics, cell_records = load_cell(entry.metrics, entry.requests)
        all_metrics.append(metrics)
        if requests:
            records[entry.cell] = cell_records
    return all_metrics, records
