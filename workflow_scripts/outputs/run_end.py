"""What the terminal shows when a run ends: one line per cell and per probe of a search (status,
decode tok/s, TTFT, why it did not finish), how many of them failed, and where the report is. A
result its own requests contradict shows as failed with the reason, as in the tables
(`record_index.checked`). The Snakefile's onsuccess and onerror handlers call `print_run_end`.
Stdlib only: the Snakefile imports it when parsed."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ..vocabulary import Status
from .compact import NOT_RUN, clip, compact_view, summary_row
from .record_index import checked, read_cell_records

# Compact columns the terminal shows, and whether each is a number (right-aligned).
TERMINAL_COLUMNS = [
    ("cell", False),
    ("status", False),
    ("decode_tok_s", True),
    ("ttft_median_ms", True),
    ("reason", False),
]
TERMINAL_REASON_CHARS = 72
COUNTED = (Status.BLOCKED, NOT_RUN)  # counted beside the failed ones


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


def run_end_text(rows: Sequence[Mapping[str, Any]], report: str, report_exists: bool) -> str:
    """Summary rows -> the lines a run ends with: the compact view's terminal columns, aligned,
    then the outcome and the report's path."""
    _, view = compact_view(rows)
    lines = [[header for header, _ in TERMINAL_COLUMNS]]
    for row in view:
        line = [row[header] for header, _ in TERMINAL_COLUMNS]
        line[-1] = clip(line[-1], TERMINAL_REASON_CHARS)
        lines.append(line)
    widths = [max(len(line[i]) for line in lines) for i in range(len(TERMINAL_COLUMNS))]
    table = [
        "  ".join(
            text.rjust(width) if numeric else text.ljust(width)
            for text, width, (_, numeric) in zip(line, widths, TERMINAL_COLUMNS, strict=True)
        ).rstrip()
        for line in lines
    ]
    where = f"Report: {report}" if report_exists else f"Report: {report} (not written yet)"
    return "\n".join(["", *table, outcome_line([row["status"] for row in view]), where]) + "\n"


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


def print_run_end(results_dir: str, cell_ids: Iterable[str], out: TextIO | None = None) -> None:
    """The handlers' one call. A slip here must not turn a finished run into a failed one."""
    out = out or sys.stderr
    report = f"{results_dir}/report.html"
    try:
        text = run_end_text(read_rows(results_dir, cell_ids), report, Path(report).exists())
    except Exception as error:  # the run itself is over: say what went wrong and go on
        text = f"(no result table: {type(error).__name__}: {error})\n"
    print(text, end="", file=out, flush=True)
