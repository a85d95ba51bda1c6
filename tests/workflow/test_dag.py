"""The DAG of a config, built without Snakemake (workflow_scripts.workflow.dag): what the rules
ask of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from workflow_scripts.outputs import labels
from workflow_scripts.workflow import dag as dag_module
from workflow_scripts.workflow.dag import build_dag
from workflow_scripts.workflow.fidelity_steps import UnknownCell

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dag(empty_workdir):
    return build_dag(yaml.safe_load((REPO / "config.yaml").read_text()))


def test_the_default_has_its_cells_series_and_searches(dag):
    # 13 cells (2 floor runs), 12 sweep points (4 floor runs) in 3 series
    assert len(dag.cells) == 25 and len(dag.series) == 3 and len(dag.searches) == 2
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


def test_every_output_path_comes_from_the_rules_table(dag):
    """Targets and inputs name a rule's file through outputs.labels.RULE_FILES: each path the
    DAG asks for is a file some rule declares, its cell, engine or weights put back as the
    wildcard."""
    declared = {f"results/{file.path}" for files in labels.RULE_FILES.values() for file in files}
    ids = [("cells/", "cell", dag.cells), ("engines/", "engine", dag.config["engines"])]
    ids.append(("weights/", "weights", dag.weights))

    def as_pattern(path):
        for folder, wildcard, names in ids:
            for name in names:
                path = path.replace(f"{folder}{name}/", f"{folder}{{{wildcard}}}/")
                path = path.replace(f"{folder}{name}.json", f"{folder}{{{wildcard}}}.json")
        return path

    asked = [*dag.final_outputs(), *dag.report_inputs(), dag.cell_records, *dag.all_cell_metrics()]
    asked += dag.probe_judgements(list(dag.cells))
    asked += [path for cell in dag.cells.values() for path in dag.inputs_of(cell).values()]
    asked += [path for key in dag.weights for path in dag.weights_inputs(key).values()]
    assert len(asked) > 3 * len(dag.cells)
    assert {as_pattern(path) for path in asked} - declared == set()
    point = next(iter(dag.cells))
    assert dag.pattern("cell", "metrics") == "results/cells/{cell}/metrics.json"
    assert dag.path("cell", "metrics", cell=point) == f"results/cells/{point}/metrics.json"


def test_the_optional_figures_join_the_summary_figures_by_rule(dag, monkeypatch):
    """`optional_figure_rules` stands in for a matrix with both optional figures (the default
    has neither): their PNGs, not their SVGs, join the summary figures."""
    assert dag.summary_figures() == [
        p for p in dag.rule_paths("summary_plots") if p.endswith(".png")
    ]
    both = ["concurrency_figure", "reference_figure"]
    monkeypatch.setattr(dag_module, "optional_figure_rules", lambda cells: both)
    assert dag.summary_figures()[-2:] == [
        "results/summary/throughput_vs_concurrency.png",
        "results/summary/measured_vs_reference.png",
    ]


def test_each_rule_takes_its_outputs_from_the_table_under_its_own_name():
    """A rule whose outputs the table holds declares them as `**JOBS.outputs("<its name>")`;
    every rule of the table is one of rules/*.smk."""
    text = "\n".join(path.read_text() for path in sorted((REPO / "rules").glob("*.smk")))
    declared = re.findall(
        r"^(?:rule|checkpoint) (\w+):\n(?:    .*\n|\n)*?    output:\n(.*)", text, re.M
    )
    taken = {rule: line.strip() for rule, line in declared}
    assert set(labels.RULE_FILES) <= set(taken)
    for rule in labels.RULE_FILES:
        assert taken[rule] == f'**JOBS.outputs("{rule}"),', rule


def test_one_localrules_directive_names_every_rule_but_the_cluster_jobs():
    """Every rule but a cell's and a series' server runs where Snakemake runs: one
    `localrules:` directive (rules/common.smk) names each of them (`all` runs nothing) and no
    rule says `localrule:` of itself."""
    text = "\n".join(path.read_text() for path in sorted((REPO / "rules").glob("*.smk")))
    text += (REPO / "Snakefile").read_text()
    rules = set(re.findall(r"^(?:rule|checkpoint) (\w+):", text, re.M)) - {"all"}
    directives = re.findall(r"^localrules:\n((?:    \w+,\n)+)", text, re.M)
    assert len(directives) == 1, directives
    named = re.findall(r"\w+", directives[0])
    assert len(named) == len(set(named)) == 19
    assert set(named) == rules - {"cell", "series_server"}
    assert "localrule:" not in text
