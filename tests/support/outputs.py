"""The result fixtures of tests/fixtures/outputs (see matrix.yaml there): a done base cell with a
published reference, a done n-gram drafter cell, the base at a second concurrency, a failed cell
and a blocked one."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from workflow_scripts.cell.record import write_blocked
from workflow_scripts.config.matrix import load_cells
from workflow_scripts.vocabulary import Cell

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "outputs"
CONFIG = FIXTURES / "matrix.yaml"

BASE = "tiny-llama__llamacpp-local__q4_0__none__c2"
DRAFTER = "tiny-llama__llamacpp-local__q4_0__ngram__c2"
BASE_C4 = "tiny-llama__llamacpp-local__q4_0__none__c4"
FAILED = "broken__llamacpp-local__q0__none__c2"
BLOCKED = "tiny-llama__llamacpp-local__q4_0__ngram__c4"


def fixture_cells() -> list[Cell]:
    return load_cells(CONFIG)


def cell_by_id(cell_id: str) -> Cell:
    return next(cell for cell in fixture_cells() if cell.id == cell_id)


def cell_files(cell_id: str) -> Path:
    return FIXTURES / "cells" / cell_id


def fixture_metrics(tmp_path: Path) -> dict[str, dict]:
    """metrics.json of every cell; the blocked one written by the cell rule's own function."""
    out = {
        path.name: json.loads((path / "metrics.json").read_text())
        for path in sorted((FIXTURES / "cells").iterdir())
    }
    blocked_dir = tmp_path / "cells" / BLOCKED
    out[BLOCKED] = write_blocked(cell_by_id(BLOCKED), blocked_dir)
    return out


def results_tree(workdir: Path) -> Path:
    """The fixtures as a finished run's results/ under `workdir`, plus the config: manifests
    older than the cells' outputs, so Snakemake finds every benchmark up to date."""
    results = workdir / "results"
    for name in ("cells", "engines", "weights"):
        shutil.copytree(FIXTURES / name, results / name)
    shutil.copy(CONFIG, workdir / "matrix.yaml")
    # Newer than the rules' scripts (Snakemake reruns a job whose script is newer than its
    # output) and never in the future (an output then reads older than its input: "clock
    # skew"), so right after an edit or a checkout this waits the two seconds that takes.
    code = [
        REPO / "Snakefile",
        *(REPO / "rules").iterdir(),
        *(REPO / "workflow_scripts").rglob("*.py"),
    ]
    manifests = max(path.stat().st_mtime for path in code) + 1
    time.sleep(max(0.0, manifests + 1.1 - time.time()))
    for path in results.rglob("*"):
        if path.is_file():
            stamp = manifests if path.parts[-2] in ("engines", "weights") else manifests + 1
            os.utime(path, (stamp, stamp))
    return results


def fixture_tables(workdir: Path) -> dict[str, list[list[str]]]:
    """summary.csv and spec_gain.csv written by the aggregation code from the fixtures (with
    their request records) under `workdir`, read back as rows of text."""
    import csv

    from workflow_scripts.outputs import writers

    records = writers.load_records(sorted((FIXTURES / "cells").glob("*/requests.jsonl")))
    out = {
        f"{name}_{ext}": workdir / f"{name}.{ext}"
        for name in ("summary", "index", "spec_gain")
        for ext in ("csv", "md")
    }
    metrics = list(fixture_metrics(workdir).values())
    writers.write_tables(metrics, fixture_cells(), out, None, records)
    return {
        name: list(csv.reader(out[f"{name}_csv"].read_text().splitlines()))
        for name in ("summary", "spec_gain")
    }
