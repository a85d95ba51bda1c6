"""What the rules hand Snakemake (workflow_scripts.workflow.rule_jobs): each rule's outputs
flagged for the report from the one table of files, and job functions that read a job's
wildcards and ask the DAG. Wildcards, `checkpoints` and `workflow` are stand-ins
(SimpleNamespace): Snakemake's own are made only while it parses the Snakefile."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import snakemake.common
import yaml
from snakemake.exceptions import IncompleteCheckpointException, WorkflowError
from snakemake.io import get_flag_value, is_flagged

from workflow_scripts.outputs import labels
from workflow_scripts.workflow.dag import build_dag
from workflow_scripts.workflow.rule_jobs import RuleJobs

REPO = Path(__file__).resolve().parents[2]


class PendingCheckpoints:
    """Checkpoint `cell_slo` with no judgement made yet, as Snakemake's is before it runs."""

    class cell_slo:  # noqa: N801 - the checkpoint's name
        @staticmethod
        def get(cell):
            raise IncompleteCheckpointException(None, cell)


@pytest.fixture(scope="module")
def jobs(empty_workdir):
    dag = build_dag(yaml.safe_load((REPO / "config.yaml").read_text()))
    return RuleJobs(dag, PendingCheckpoints, SimpleNamespace(dryrun=True))


def test_a_cells_figures_are_shown_under_its_model_with_its_labels(jobs):
    cell = jobs.dag.cells[next(iter(jobs.dag.cells))]
    outputs = jobs.outputs("card")
    assert list(outputs) == [file.key for file in labels.RULE_FILES["card"]]
    assert outputs["card_md"] == "results/cells/{cell}/card.md"
    assert not is_flagged(outputs["card_md"], "report")
    shown = get_flag_value(outputs["memory_plot"], "report")
    assert (shown.caption, shown.category) == ("../report/cell_memory.rst", "Memory")
    wildcards = SimpleNamespace(cell=cell.id)
    assert shown.subcategory(wildcards) == cell.model
    assert shown.labels(wildcards) == labels.report_labels(cell, "memory over time")


def test_a_summary_page_is_shown_in_its_category_and_a_table_is_not(jobs):
    outputs = jobs.outputs("aggregate")
    shown = get_flag_value(outputs["spec_gain_html"], "report")
    assert shown.caption == "../report/spec_gain_table.rst"
    assert (shown.category, shown.subcategory, shown.labels) == ("Speculative decoding", None, None)
    assert outputs["index_csv"] == "results/summary/index.csv"
    assert not is_flagged(outputs["index_csv"], "report")


def test_an_unknown_cell_is_a_workflow_error_that_names_it(jobs):
    with pytest.raises(WorkflowError, match="no cell 'nope' in this config"):
        jobs.cell_inputs(SimpleNamespace(cell="nope"))
    with pytest.raises(WorkflowError, match="no series 'nope'"):
        jobs.series_inputs(SimpleNamespace(series="nope"))


def test_a_point_of_a_series_reads_its_server_record_as_ancient(jobs):
    point = next(cell for cell in jobs.dag.cells if jobs.dag.series_of(cell))
    inputs = jobs.cell_inputs(SimpleNamespace(cell=point))
    assert inputs["server"] == jobs.dag.series_record(jobs.dag.series_of(point))
    assert is_flagged(inputs["server"], "ancient")
    assert jobs.cell_threads(SimpleNamespace(cell=point)) == 0
    assert jobs.cell_group(SimpleNamespace(cell=point)).startswith("series-")


def test_a_floor_run_waits_for_its_reference_and_reads_it_as_ancient(jobs):
    """Its job reads the reference's metrics.json (and is not started when that run did not
    finish: cell.run.check_inputs); a rerun of the reference alone does not rerun it. Any other
    cell has no such input."""
    floor = next(cell for cell in jobs.dag.cells if cell.endswith("__floor"))
    reference = floor.removesuffix("__floor")
    inputs = jobs.cell_inputs(SimpleNamespace(cell=floor))
    assert inputs["floor_reference"] == f"results/cells/{reference}/metrics.json"
    assert is_flagged(inputs["floor_reference"], "ancient")
    assert "floor_reference" not in jobs.cell_inputs(SimpleNamespace(cell=reference))


def test_the_search_tables_wait_on_each_series_first_probe(jobs):
    """No judgement made yet: each search's walk stops at its first probe, one each."""
    inputs = jobs.slo_table_inputs(SimpleNamespace())
    assert inputs["searches"] == jobs.dag.search_files()
    assert len(inputs["probes"]) == len(jobs.dag.searches) == 2
    assert all(path.endswith("/slo.json") for path in inputs["probes"])


def test_snakemake_reads_a_job_methods_signature_without_inspecting_it(jobs, monkeypatch):
    def no_signature(*args, **kwargs):
        raise AssertionError("Snakemake inspected the signature again")

    monkeypatch.setattr(snakemake.common.inspect, "signature", no_signature)
    assert list(snakemake.common.get_function_params(jobs.cell_settings)) == ["wildcards"]
    aux = snakemake.common.get_input_function_aux_params(
        jobs.weights_inputs, {"attempt": 2, "input": [], "threads": 1}
    )
    assert aux == {}
