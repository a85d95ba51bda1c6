"""The DAG of a config, built without Snakemake (workflow_scripts.dag): what the rules ask of it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from workflow_scripts.dag import UnknownCell, build_dag

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dag():
    return build_dag(yaml.safe_load((REPO / "config.yaml").read_text()))


def test_the_default_has_its_cells_series_and_searches(dag):
    assert len(dag.cells) == 14 and len(dag.series) == 2 and len(dag.searches) == 2
    point = next(cell for cell in dag.cells if cell.endswith("__sweep-c4"))
    assert dag.series_of(point) and dag.series_of(next(iter(dag.cells))) is None
    assert dag.series_input_args(dag.series_of(point)).startswith("--engine ")


def test_a_probe_is_made_by_id_and_an_unknown_id_is_named(dag):
    search = next(iter(dag.searches.values()))
    probe = search.probe_id((1, 0))
    assert dag.cell_of(probe).id == probe
    assert dag.goal_input(probe).endswith(".json")
    with pytest.raises(UnknownCell, match="no cell 'nope' in this config"):
        dag.cell_of("nope")


def test_the_targets_end_with_the_report_and_hold_the_sweep_and_search_tables(dag):
    targets = dag.final_outputs()
    assert targets[-1] == "results/report.html"
    assert "results/summary/sweeps.csv" in targets and "results/summary/slo.csv" in targets
    assert all(path in dag.report_inputs() for path in dag.summary_figures())
