"""The cell rule's work from plain values (`cell.jobs.run_cell_job`, what entry/cell.py calls):
a blocked cell gets its stub with no stamps to read; any other cell without its stamps is
refused by name before anything starts."""

from __future__ import annotations

import json

import pytest

from tests.support.outputs import BLOCKED, cell_by_id
from workflow_scripts.cell.jobs import run_cell_job
from workflow_scripts.vocabulary import Cell, Status


def test_a_blocked_cell_gets_its_stub_from_plain_values(tmp_path):
    out = tmp_path / "cells" / BLOCKED
    run_cell_job(Cell.from_dict(cell_by_id(BLOCKED)), out, tmp_path / "failures", None)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == Status.BLOCKED and metrics["reason"]
    assert (out / "requests.jsonl").read_text() == ""


def test_a_cell_without_its_stamps_is_refused_by_name(tmp_path):
    cell = Cell.from_dict({**cell_by_id(BLOCKED), "blocked": None})
    with pytest.raises(ValueError, match=BLOCKED):
        run_cell_job(cell, tmp_path / "out", tmp_path / "failures", None)
    assert not (tmp_path / "out").exists()
