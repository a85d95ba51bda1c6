"""The index of every cell's record files: the one input of each table and figure rule.

Each table and figure reads every cell's metrics.json and requests.jsonl. Named as inputs of
each of those rules, they would be most of a large matrix's dry run (1000 points: 9000 edges
to resolve, as many files to check). So one job (rule `records`) takes them and writes this
index; the tables and figures take the index alone. A cell redone makes its records newer than
the index, so the index is rewritten and every table and figure follows.

A cell's metrics.json stands for all of its records: the cell job writes it last, after its
requests.jsonl and memory.csv (`cell.record.write_outputs`), so it is never older than they are.
The index and each card name it alone and find the others beside it: one edge per cell, not
three.

It is also where a result is checked, once, for every table, figure, comparison and the lines a
run ends with (`load_cell`): a metrics.json or requests.jsonl that does not parse, or figures its
own requests contradict, make a failed cell whose reason begins `invalid result`. Stdlib only:
the end-of-run lines read it in the Snakemake process.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..atomic import write_json
from ..loadgen.records import OK, RequestRecord, read_records
from ..vocabulary import IDENTITY_COLUMNS, CellMetrics, Status


@dataclass(frozen=True)
class CellFiles:
    """One cell's records, by path."""

    cell: str
    metrics: str
    requests: str
    memory: str


def files_of(metrics: str | Path) -> CellFiles:
    """A cell's records, from its metrics.json: the others are in the same folder."""
    folder = Path(metrics).parent
    return CellFiles(
        cell=folder.name,
        metrics=str(metrics),
        requests=str(folder / "requests.jsonl"),
        memory=str(folder / "memory.csv"),
    )


def write_index(path: str | Path, metrics: Sequence[str | Path]) -> None:
    """The `records` rule's output: each cell's record files, from its metrics.json."""
    write_json(path, {"cells": [asdict(files_of(m)) for m in metrics]})


def read_index(path: str | Path, only: Sequence[str] | None = None) -> list[CellFiles]:
    """The index's cells in matrix order; `only`: just those ids (a sweep's points)."""
    entries = [CellFiles(**entry) for entry in json.loads(Path(path).read_text())["cells"]]
    if only is None:
        return entries
    wanted = set(only)
    return [entry for entry in entries if entry.cell in wanted]


# How far a cell's decode tok/s may stand from Σ completion tokens / duration of its own records:
# metrics.json keeps full floats, so only float noise (and a rounded copy) fits in this.
DECODE_REL_TOLERANCE = 1e-3
COUNT_KEYS = ("completed", "errors", "incomplete", "not_started", "prompt_tokens", "retries")
RATE_KEYS = ("decode_tok_s", "prefill_tok_s", "req_per_s", "duration_s")
INVALID_RESULT = "invalid result"  # how the reason of a damaged cell begins
# What an invalid result keeps: who the cell is and what it ran, none of its figures.
KEPT_WHEN_INVALID = frozenset(
    {
        *("cell", *IDENTITY_COLUMNS, "concurrency"),
        *("request_rate", "series", "sweep", "server_start", "num_prompts", "synthetic"),
        *("started_at", "finished_at", "host", "engine_version", "engine_info", "weights"),
        *("server_command", "dataset_note", "dataset_sha256"),
    }
)


def read_metrics(path: str | Path) -> CellMetrics:
    """A metrics.json; one that does not parse (cut short, not an object) reads as a failed cell
    whose reason names the file, never as a traceback that stops every table."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        data = error
    if not isinstance(data, dict):
        reason = f"{type(data).__name__}: {data}" if isinstance(data, Exception) else "no object"
        return {
            "cell": Path(path).parent.name,
            "status": Status.FAILED,
            "reason": f"{INVALID_RESULT}: {path} does not parse ({reason}); rerun to re-measure",
        }
    return data


def read_cell_records(path: str | Path) -> list[RequestRecord] | str:
    """A requests.jsonl's records, or why they cannot be read (a missing file: no records)."""
    try:
        return read_records(path)
    except FileNotFoundError:
        return []
    except (OSError, ValueError, TypeError) as error:
        return f"{INVALID_RESULT}: {path} does not parse ({type(error).__name__}: {error})"


def invalid_reason(metrics: Mapping[str, Any], records: Sequence[RequestRecord]) -> str | None:
    """Why a done cell's figures cannot be true of its own requests (None: they can): a negative
    count or rate, more requests counted than recorded, or a decode tok/s that is not Σ the
    completed requests' completion tokens / the run's duration."""
    if metrics.get("status") != Status.DONE:
        return None
    for key in (*COUNT_KEYS, *RATE_KEYS):
        value = metrics.get(key)
        if isinstance(value, int | float) and not value >= 0:
            return f"{key} is {value}"
    if not records:
        return None
    measured = [r for r in records if not r.warmup]
    counted = sum(int(metrics.get(key) or 0) for key in ("completed", "errors", "incomplete"))
    if counted > len(measured):
        return (
            f"completed {metrics.get('completed')} + errors + incomplete = {counted} above the "
            f"{len(measured)} requests recorded"
        )
    done = [r for r in measured if r.status == OK]
    if metrics.get("completed") is not None and metrics["completed"] != len(done):
        return f"completed {metrics['completed']} but {len(done)} requests recorded done"
    ends = [r.sent_s + r.e2e_s for r in measured if r.e2e_s is not None]
    duration_s = max(ends) - min(r.sent_s for r in measured) if ends else 0.0
    decode = metrics.get("decode_tok_s")
    if isinstance(decode, int | float) and duration_s > 0:
        expected = sum(r.completion_tokens or 0 for r in done) / duration_s
        if abs(decode - expected) > DECODE_REL_TOLERANCE * max(abs(expected), 1.0):
            return (
                f"decode_tok_s {decode:g} but its requests give {expected:.4g} "
                "(completion tokens / duration)"
            )
    return None


def checked(
    metrics: CellMetrics, records: Sequence[RequestRecord] | str, path: str | Path
) -> CellMetrics:
    """A cell's metrics as every table may take them: a done cell whose figures its own records
    contradict, or whose records do not parse, becomes a failed one with the reason (shown,
    never aggregated)."""
    reason = records if isinstance(records, str) else invalid_reason(metrics, records)
    if reason is None or metrics.get("status") != Status.DONE:
        return metrics
    if not reason.startswith(INVALID_RESULT):
        reason = f"{INVALID_RESULT}: {path}: {reason}"
    kept = {key: value for key, value in metrics.items() if key in KEPT_WHEN_INVALID}
    return {**kept, "status": Status.FAILED, "reason": reason}


def load_cell(metrics_path: str | Path, requests_path: str | Path):
    """One cell's metrics (checked against its records: `checked`) and its records."""
    read = read_metrics(metrics_path)
    records = read_cell_records(requests_path)
    metrics = checked(read, records, metrics_path)
    return metrics, [] if isinstance(records, str) or metrics is not read else records
