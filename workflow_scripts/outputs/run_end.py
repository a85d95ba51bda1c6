"""What the terminal shows when a run ends: a line per cell and per probe of a search (status,
decode tok/s, TTFT, J per output token where energy was measured, why it did not finish) under a
header per model and engine, why energy was not measured where it was not, how many of them
failed, and where the report is. Every line fits the terminal, 80 columns at most. A result its
own requests contradict shows as failed with the reason, as in the tables
(`record_index.checked`). The Snakefile's onsuccess and onerror handlers call `print_run_end`.
Stdlib only: the Snakefile imports it when parsed."""

from __future__ import annotations

import csv
import json
import sys
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ..terminal import terminal_width
from ..vocabulary import Status
from .compact import NOT_RUN, compact_view, number_text, summary_row
from .energy.view import not_measured_lines
from .record_index import checked, read_cell_records

WIDTH = 80  # CI's log, and the most a table takes in a wider terminal
GAP = "  "
ROW_INDENT = "  "  # a row under its group's header
REASON_INDENT = "    "  # a reason too long to sit beside its row, on the lines below it
REASON_LINES = 2
ELLIPSIS = "..."
GROUP_PARTS = 2  # model and engine: the id parts a group's header names
COUNTED = (Status.BLOCKED, NOT_RUN)  # counted beside the failed ones


@dataclass(frozen=True)
class TerminalColumn:
    """A column after a row's name: its header (with the unit), the compact view's column it
    shows (or a summary row key the view lacks) and whether it is a number (right-aligned). A
    caller adds a column by passing a longer list; the reason always comes last."""

    header: str
    key: str
    numeric: bool = False


TERMINAL_COLUMNS: tuple[TerminalColumn, ...] = (
    TerminalColumn("status", "status"),
    TerminalColumn("decode tok/s", "decode_tok_s", numeric=True),
    TerminalColumn("TTFT median ms", "ttft_median_ms", numeric=True),
)
# Where the run compared outputs (summary/fidelity.csv): the verdict against the reference.
OUTPUTS_COLUMN = TerminalColumn("outputs", "outputs")
# Where some cell's energy was measured (metrics.json `energy`): joules per output token.
ENERGY_COLUMN = TerminalColumn("J/out tok", "j_per_output_token", numeric=True)


def outcome_line(statuses: Sequence[str]) -> str:
    """`1 of 5 cells failed; 1 blocked.`, or `5 of 5 cells done.`"""
    total = len(statuses)
    failed = statuses.count(Status.FAILED)
    head = (
        f"{failed} of {total} cells failed"
        if failed
        else f"{statuses.count('done')} of {total} cells done"
    )
    extra = [f"{statuses.count(status)} {status}" for status in COUNTED if status in statuses]
    return "; ".join([head, *extra]) + "."


def middle_clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, cut in the middle: both ends of an id still read."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(ELLIPSIS), 2)
    return text[: (keep + 1) // 2] + ELLIPSIS + text[len(text) - keep // 2 :]


def split_id(cell_id: str) -> tuple[str, str]:
    """`model__engine__rest` -> (`model__engine__`, `rest`): a group's header and a row's name,
    which spell the id together; an id of fewer parts is a name in no group."""
    parts = cell_id.split("__", GROUP_PARTS)
    if len(parts) <= GROUP_PARTS:
        return "", cell_id
    return "__".join(parts[:GROUP_PARTS]) + "__", parts[GROUP_PARTS]


def column_text(row: Mapping[str, Any], shown: Mapping[str, str], column: TerminalColumn) -> str:
    """The compact view's text for the column, or the summary row's value if the view lacks it."""
    return shown[column.key] if column.key in shown else number_text(row.get(column.key))


def table_lines(
    rows: Sequence[Mapping[str, Any]],
    view: Sequence[Mapping[str, str]],
    columns: Sequence[TerminalColumn],
    width: int,
) -> list[str]:
    """The column headers, then each group's header (ids in no group first) and its rows in the
    order given: the name, the columns, and the reason beside them where it fits in `width`,
    else wrapped on up to `REASON_LINES` lines below, cut with an ellipsis. A name too long to
    sit beside its figures takes a line of its own, cut in the middle only past `width`."""
    texts = [
        [column_text(row, shown, c) for c in columns] for row, shown in zip(rows, view, strict=True)
    ]
    widths = [max([len(c.header)] + [len(t[i]) for t in texts]) for i, c in enumerate(columns)]
    figures_width = sum(len(GAP) + w for w in widths)
    names = [ROW_INDENT + split_id(shown["cell"])[1] for shown in view]
    name_width = max([len("cell")] + [len(n) for n in names if len(n) + figures_width <= width])
    reason_at = name_width + figures_width + len(GAP)
    beside = [bool(s["reason"]) and reason_at + len(s["reason"]) <= width for s in view]

    def line(name: str, cells: Sequence[str]) -> str:
        aligned = [
            text.rjust(w) if c.numeric else text.ljust(w)
            for text, w, c in zip(cells, widths, columns, strict=True)
        ]
        return GAP.join([name.ljust(name_width), *aligned])

    header = line("cell", [c.header for c in columns]) + (GAP + "reason" if any(beside) else "")
    groups: dict[str, list[int]] = {"": []}
    for index, shown in enumerate(view):
        groups.setdefault(split_id(shown["cell"])[0], []).append(index)
    out = [header.rstrip()]
    for prefix, members in groups.items():
        out += [middle_clip(prefix, width)] if prefix else []
        for index in members:
            name, reason = names[index], view[index]["reason"]
            if len(name) > name_width:
                out.append(middle_clip(name, width))
                name = ""
            out.append(
                (line(name, texts[index]) + (GAP + reason if beside[index] else "")).rstrip()
            )
            if reason and not beside[index]:
                out += textwrap.wrap(
                    reason,
                    width,
                    initial_indent=REASON_INDENT,
                    subsequent_indent=REASON_INDENT,
                    max_lines=REASON_LINES,
                    placeholder=ELLIPSIS,
                )
    return out


def run_end_text(
    rows: Sequence[Mapping[str, Any]],
    report: str,
    report_exists: bool,
    columns: Sequence[TerminalColumn] = TERMINAL_COLUMNS,
    width: int = WIDTH,
) -> str:
    """Summary rows -> the lines a run ends with, each within `width`: the table (J per output
    token where some cell's energy was measured), why energy was not measured where it was
    not (once when every cell says the same), then the outcome and the report's path."""
    _, view = compact_view(rows)
    if any(row.get(ENERGY_COLUMN.key) is not None for row in rows):
        columns = (*columns, ENERGY_COLUMN)
    table = table_lines(rows, view, columns, width)
    energy = [
        wrapped
        for line in not_measured_lines(rows)
        for wrapped in textwrap.wrap(
            line,
            width,
            subsequent_indent=REASON_INDENT,
            max_lines=REASON_LINES,
            placeholder=ELLIPSIS,
        )
    ]
    where = f"Report: {report}" if report_exists else f"Report: {report} (not written yet)"
    outcome = outcome_line([row["status"] for row in view])
    return "\n".join(["", *table, *energy, outcome, where]) + "\n"


def read_rows(results_dir: str | Path, cell_ids: Iterable[str]) -> list[dict[str, Any]]:
    """Each cell's summary row from its metrics.json, checked against its requests.jsonl; a
    cell without one yet (or with one that does not parse) is `not run`."""
    rows = []
    for cell_id in cell_ids:
        path = Path(results_dir) / "cells" / cell_id / "metrics.json"
        try:
            metrics = json.loads(path.read_text())
        except FileNotFoundError:
            metrics = {"cell": cell_id, "status": NOT_RUN}
        except (OSError, ValueError) as error:
            metrics = {"cell": cell_id, "status": NOT_RUN, "reason": f"{path}: {error}"}
        else:
            if isinstance(metrics, dict):
                requests = read_cell_records(path.with_name("requests.jsonl"))
                metrics = checked(metrics, requests, path)
        rows.append(summary_row(metrics))
    return rows


def with_outputs_verdicts(
    results_dir: str | Path, rows: list[dict[str, Any]], columns: Sequence[TerminalColumn]
) -> Sequence[TerminalColumn]:
    """Each row's verdict on its outputs against its reference (summary/fidelity.csv, where the
    run wrote one: `unchanged`, `changed`, ...), and the columns with OUTPUTS_COLUMN added."""
    path = Path(results_dir) / "summary" / "fidelity.csv"
    if not path.exists():
        return columns
    with open(path, newline="") as handle:
        verdicts = {row["cell"]: row["verdict"] for row in csv.DictReader(handle)}
    for row in rows:
        row[OUTPUTS_COLUMN.key] = verdicts.get(row["cell"], "")
    return (*columns, OUTPUTS_COLUMN)


def print_run_end(
    results_dir: str,
    cell_ids: Iterable[str],
    out: TextIO | None = None,
    columns: Sequence[TerminalColumn] = TERMINAL_COLUMNS,
) -> None:
    """The handlers' one call, as wide as the terminal allows. A slip here must not turn a
    finished run into a failed one."""
    out = out or sys.stderr
    report = f"{results_dir}/report.html"
    try:
        rows = read_rows(results_dir, cell_ids)
        columns = with_outputs_verdicts(results_dir, rows, columns)
        text = run_end_text(rows, report, Path(report).exists(), columns, terminal_width(WIDTH))
    except Exception as error:  # the run itself is over: say what went wrong and go on
        text = f"(no result table: {type(error).__name__}: {error})\n"
    print(text, end="", file=out, flush=True)
