"""The records index the tables and figures read (workflow_scripts.outputs.record_index): each
cell's record files found beside its metrics.json, in matrix order, read back whole or for some
cells; the fixture cells' real records through `load_indexed`; and the premise that lets
metrics.json stand for a cell's records in the DAG: the cell job writes it last."""

from __future__ import annotations

import json

from tests.support.outputs import FIXTURES
from workflow_scripts.cell.record import write_outputs
from workflow_scripts.loadgen.records import RequestRecord
from workflow_scripts.outputs.record_index import CellFiles, files_of, read_index, write_index
from workflow_scripts.outputs.writers import load_indexed, load_metrics, load_records

FIXTURE_IDS = [path.parent.name for path in sorted((FIXTURES / "cells").glob("*/requests.jsonl"))]


def test_a_cells_records_are_found_beside_its_metrics():
    files = files_of("results/cells/m__e__q__none__c4/metrics.json")
    assert files == CellFiles(
        cell="m__e__q__none__c4",
        metrics="results/cells/m__e__q__none__c4/metrics.json",
        requests="results/cells/m__e__q__none__c4/requests.jsonl",
        memory="results/cells/m__e__q__none__c4/memory.csv",
    )


def test_the_index_reads_back_whole_or_for_some_cells_in_its_own_order(tmp_path):
    metrics = [f"cells/c{i}/metrics.json" for i in (3, 0, 2, 1)]
    write_index(tmp_path / "records.json", metrics)
    entries = read_index(tmp_path / "records.json")
    assert [entry.cell for entry in entries] == ["c3", "c0", "c2", "c1"]
    assert entries == [files_of(m) for m in metrics]
    some = read_index(tmp_path / "records.json", only=["c1", "c3", "nope"])
    assert [entry.cell for entry in some] == ["c3", "c1"]


def test_load_indexed_reads_what_the_files_hold(tmp_path):
    assert len(FIXTURE_IDS) >= 3
    metrics = [str(FIXTURES / "cells" / cell / "metrics.json") for cell in FIXTURE_IDS]
    requests = [str(FIXTURES / "cells" / cell / "requests.jsonl") for cell in FIXTURE_IDS]
    write_index(tmp_path / "records.json", metrics)
    all_metrics, records = load_indexed(read_index(tmp_path / "records.json"))
    assert all_metrics == load_metrics(metrics)
    assert records == load_records(requests) and set(records) == set(FIXTURE_IDS)
    some, none = load_indexed(
        read_index(tmp_path / "records.json", only=FIXTURE_IDS[:1]), requests=False
    )
    assert some == load_metrics(metrics[:1]) and none == {}


def test_the_cell_job_writes_metrics_json_after_its_other_records(tmp_path):
    """The card and the index name metrics.json alone: it must never be older than the
    requests.jsonl and memory.csv of the same run."""
    source = FIXTURES / "cells" / FIXTURE_IDS[0]
    lines = (source / "requests.jsonl").read_text().splitlines()
    records = [RequestRecord.from_dict(json.loads(line)) for line in lines if line]
    result = json.loads((source / "metrics.json").read_text())
    write_outputs(tmp_path, result, records)
    files = files_of(tmp_path / "metrics.json")
    written = {
        name: (tmp_path / name).stat().st_mtime_ns for name in ("requests.jsonl", "memory.csv")
    }
    assert all((tmp_path / "metrics.json").stat().st_mtime_ns >= t for t in written.values())
    assert load_records([files.requests])[tmp_path.name] == records
