"""The cell rule's work from plain values (`cell.jobs.run_cell_job`, what entry/cell.py calls):
a blocked cell gets its stub with no stamps to read; any other cell without its stamps is
refused by name before anything starts; a floor run whose reference did not finish is not
started."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.support.config import default_config
from tests.support.outputs import BLOCKED, cell_by_id
from workflow_scripts.cell.jobs import run_cell_job
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.fidelity.pairs import floor_id
from workflow_scripts.vocabulary import Status


def test_a_blocked_cell_gets_its_stub_from_plain_values(tmp_path):
    out = tmp_path / "cells" / BLOCKED
    run_cell_job(cell_by_id(BLOCKED), out, tmp_path / "failures", None)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == Status.BLOCKED and metrics["reason"]
    assert (out / "requests.jsonl").read_text() == ""


def test_a_cell_without_its_stamps_is_refused_by_name(tmp_path):
    cell = dataclasses.replace(cell_by_id(BLOCKED), blocked=None)
    with pytest.raises(ValueError, match=BLOCKED):
        run_cell_job(cell, tmp_path / "out", tmp_path / "failures", None)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("reference", "said"),
    [
        (
            {"status": "failed", "reason": "RuntimeError: server exited 1\nits log"},
            "failed: RuntimeError: server exited 1; its floor run is not started",
        ),
        ("{cut short", "__f16__none__c4 failed: "),  # a metrics.json that does not parse
    ],
    ids=["failed", "unreadable"],
)
def test_a_floor_run_whose_reference_did_not_finish_is_not_started(tmp_path, reference, said):
    """It fails before any server starts, naming its reference and why (and is retried next run
    with it). Before, it ran a second measurement no pair could be judged against."""
    ref = "smollm2-135m__llamacpp-cpu__f16__none__c4"
    floor = next(c for c in build_cells(validate_config(default_config())) if c.id == floor_id(ref))
    stamps = tmp_path / "stamps"
    stamps.mkdir()
    (stamps / "engine.json").write_text(json.dumps({"status": "done"}))
    (stamps / "weights.json").write_text(json.dumps({"status": "done", "primary": "m.gguf"}))
    metrics = tmp_path / "cells" / ref / "metrics.json"
    metrics.parent.mkdir(parents=True)
    text = reference if isinstance(reference, str) else json.dumps({"cell": ref, **reference})
    metrics.write_text(text)
    out = tmp_path / "cells" / floor.id
    run_cell_job(
        floor,
        out,
        tmp_path / "failures",
        None,
        engine=stamps / "engine.json",
        weights=stamps / "weights.json",
        floor_reference=metrics,
    )
    result = json.loads((out / "metrics.json").read_text())
    assert result["status"] == Status.FAILED
    assert result["reason"].startswith(f"RuntimeError: reference {ref} failed: ")
    assert said in result["reason"]
    assert (out / "server.log").read_text() == "(the server was never started)\n"
    assert (tmp_path / "failures" / f"{floor.id}.count").read_text() == "1\n"
