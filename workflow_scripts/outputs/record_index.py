"""The index of every cell's record files: the one input of each table and figure rule.

Each table and figure reads every cell's metrics.json and requests.jsonl. Named as inputs of
each of those rules, they were most of a large matrix's dry run (1000 points: 9000 edges to
resolve, as many files to check). One job (rule `records`) now takes them and writes this
index; the tables and figures take the index alone. A cell redone makes its records newer than
the index, so the index is rewritten and every table and figure follows, as before.

A cell's metrics.json stands for all of its records: the cell job writes it last, after its
requests.jsonl and memory.csv (`cell.record.write_outputs`), so it is never older than they are.
The index and each card name it alone and find the others beside it: one edge per cell, not
three.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..atomic import write_json


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
    write_json(path, {"cells": [asdict(files_of(m)) for m in metrics]})


def read_index(path: str | Path, only: Sequence[str] | None = None) -> list[CellFiles]:
    """The index's cells in matrix order; `only`: just those ids (a sweep's points)."""
    entries = [CellFiles(**entry) for entry in json.loads(Path(path).read_text())["cells"]]
    if only is None:
        return entries
    wanted = set(only)
    return [entry for entry in entries if entry.cell in wanted]


def index_from_snakemake(sm) -> None:
    write_index(sm.output.records, sm.input.metrics)
