"""Results that do not heal by themselves: a cut-short metrics.json or slo.json, and a metrics.json
that parses but whose figures its own requests.jsonl contradicts (decode tok/s of 1e9, more
requests completed than recorded, a negative count). The one reader of every table, figure and
comparison (`writers.load_indexed` / `load_cell`) shows such a cell as failed with the reason and
never aggregates it; `compare` says which folder is damaged with its own exit code; the search's
walk removes a probe's file that does not parse (so the probe is measured or judged again) with
a line that names it, and the Snakefile's parse a plain cell's metrics.json the same way. All on
copies of the fixture cells: no stand-in is needed."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys

import pytest

from tests.support.outputs import BASE, DRAFTER, FIXTURES, REPO, fixture_cells
from tests.support.pipeline import tiny_config
from workflow_scripts.outputs import compare_runs, writers
from workflow_scripts.outputs.record_index import files_of
from workflow_scripts.outputs.search.judgement import heal_probe, read_verdict, settled_verdict
from workflow_scripts.slo.objectives import Slo
from workflow_scripts.workflow.dag import build_dag


@pytest.fixture
def cells(tmp_path):
    folder = tmp_path / "results" / "cells"
    shutil.copytree(FIXTURES / "cells", folder)
    return folder


def tamper(cells, cell: str, **figures) -> None:
    path = cells / cell / "metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **figures}))


def loaded(cells):
    metrics, records = writers.load_indexed(
        [files_of(path) for path in sorted(cells.glob("*/metrics.json"))]
    )
    return {m["cell"]: m for m in metrics}, records


def test_the_fixture_cells_are_consistent_with_their_own_requests(cells):
    """The check must pass what the pipeline writes, or every other test here proves nothing."""
    metrics, _ = loaded(cells)
    assert metrics[BASE]["status"] == metrics[DRAFTER]["status"] == "done"


@pytest.mark.parametrize(
    ("figures", "said"),
    [
        ({"decode_tok_s": 1e9}, "decode_tok_s 1e+09 but its requests give"),
        ({"completed": 500}, "above the"),
        ({"errors": -3}, "errors is -3"),
    ],
)
def test_impossible_figures_make_a_failed_cell_with_the_reason_never_a_row_of_figures(
    cells, tmp_path, figures, said
):
    tamper(cells, BASE, **figures)
    metrics, records = loaded(cells)
    base = metrics[BASE]
    assert base["status"] == "failed"
    assert base["reason"].startswith("invalid result: ") and said in base["reason"]
    assert str(cells / BASE / "metrics.json") in base["reason"]
    assert records[BASE] == []  # its requests feed no interval either
    out = {
        f"{name}_{ext}": tmp_path / f"{name}.{ext}"
        for name in ("summary", "index", "spec_gain")
        for ext in ("csv", "md")
    }
    writers.write_tables(list(metrics.values()), fixture_cells(), out, None, records)
    with open(out["summary_csv"]) as handle:
        row = next(r for r in csv.DictReader(handle) if r["cell"] == BASE)
    assert row["status"] == "failed" and row["decode_tok_s"] == "" and said in row["reason"]
    assert "1e+09" not in out["summary_csv"].read_text().replace(said, "")
    shown = next(line for line in out["summary_md"].read_text().splitlines() if BASE in line)
    assert "failed" in shown and "invalid result" in shown


@pytest.mark.parametrize("name", ["metrics.json", "requests.jsonl"])
def test_a_cut_short_file_is_a_failed_cell_naming_the_file_not_a_traceback(cells, name):
    path = cells / BASE / name
    path.write_text(path.read_text()[: len(path.read_text()) // 2])
    metrics, _ = loaded(cells)
    assert metrics[BASE]["status"] == "failed"
    assert metrics[BASE]["reason"].startswith(f"invalid result: {path} does not parse")
    assert metrics[DRAFTER]["status"] == "done"


def run_compare(a, b, *extra):
    return subprocess.run(
        [sys.executable, "-m", "workflow_scripts.compare", str(a), str(b), *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_compare_names_a_damaged_folder_with_its_own_exit_code(tmp_path, cells):
    """Exit 1 means a regression under --fail-above: a damaged folder exits 3, names the file,
    and compares the rest."""
    a = cells.parent
    b = tmp_path / "b"
    shutil.copytree(FIXTURES / "cells", b / "cells")
    broken = b / "cells" / BASE / "metrics.json"
    broken.write_text(broken.read_text()[:40])
    proc = run_compare(a, b, "--fail-above", "5")
    assert proc.returncode == compare_runs.DAMAGED == 3, proc.stderr
    assert "Traceback" not in proc.stderr and str(broken) in proc.stderr
    assert DRAFTER in proc.stdout  # the readable cells are still compared
    tamper(b / "cells", DRAFTER, decode_tok_s=1e9)
    assert run_compare(a, b).returncode == 3


GOAL = Slo.from_dict({"tpot_ms": {"percentile": 90, "max": 50}})


def test_a_cut_short_probe_file_is_removed_with_a_line_naming_it(tmp_path):
    """The walk runs while Snakemake builds the DAG: a probe whose slo.json or metrics.json does
    not parse is not measured (removed: judged or measured again), and the line names it."""
    folder = tmp_path / "p-c1"
    folder.mkdir()
    goal = tmp_path / "goal.json"
    goal.write_text(json.dumps(GOAL.to_dict()))
    (folder / "metrics.json").write_text('{"status": "done"}')
    (folder / "slo.json").write_text('{"verdict": "pa')
    said = []
    assert read_verdict(folder / "slo.json") is None
    assert settled_verdict(folder / "slo.json", folder / "metrics.json", goal, GOAL) is None
    assert heal_probe(folder, said.append)
    assert not (folder / "slo.json").exists() and (folder / "metrics.json").exists()
    assert said == [f"{folder / 'slo.json'} does not parse " + said[0].split(" parse ", 1)[1]]
    assert "judged again" in said[0]
    (folder / "slo.json").write_text('{"verdict": "pass"}')
    (folder / "metrics.json").write_text('{"status": "do')
    said.clear()
    assert heal_probe(folder, said.append)
    assert not (folder / "slo.json").exists() and not (folder / "metrics.json").exists()
    assert str(folder / "metrics.json") in said[0] and "measured again" in said[0]
    assert not heal_probe(folder, said.append)  # nothing left to heal: no line
    assert len(said) == 1
    (folder / "metrics.json").write_text('{"status": "do')
    assert heal_probe(folder, said.append, remove=False)  # a dry run: named, left as it is
    assert (folder / "metrics.json").exists() and "a run removes it" in said[-1]


def test_a_plain_cells_cut_short_metrics_is_named_and_the_cell_failed_for_a_rerun(tmp_path):
    """While the Snakefile is parsed (workflow.hooks.open_workflow): a cell's metrics.json that
    does not parse is named; a dry run leaves it; a run makes it a whole failed record naming
    the file and bumps the cell's failure counter, so the run measures the cell again as it
    retries a failed cell. Before, the cell read as done on every run and its card and figure
    failed with a traceback."""
    config = tiny_config([{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"}])
    config["results_dir"] = str(tmp_path / "results")
    graph = build_dag(config)
    (cell,) = graph.cells
    folder = tmp_path / "results" / "cells" / cell
    folder.mkdir(parents=True)
    cut = folder / "metrics.json"
    cut.write_text('{"status": "do')
    said: list[str] = []
    graph.heal_cells(dry_run=True, say=said.append)
    assert len(said) == 1 and said[0].startswith(f"{cut} does not parse (JSONDecodeError: ")
    assert said[0].endswith("a run marks the cell failed and measures it again")
    assert cut.read_text() == '{"status": "do' and graph.failed_attempts == {}
    graph.heal_cells(say=said.append)
    assert said[1].endswith("the cell is marked failed and measured again")
    failed = json.loads(cut.read_text())
    assert (failed["cell"], failed["status"]) == (cell, "failed")
    assert failed["reason"].startswith(f"invalid result: {cut} did not parse (JSONDecodeError")
    assert graph.failed_attempts == {cell: 1}  # the cell rule's param: this run retries it
    assert (tmp_path / "results" / "failures" / f"{cell}.count").read_text() == "1\n"
    graph.heal_cells(say=said.append)  # whole now: left alone, no line
    assert len(said) == 2 and graph.failed_attempts == {cell: 1}


def test_a_judgement_without_its_latency_basis_is_not_settled(tmp_path):
    """A probe's slo.json written before judgements said which basis their latencies ran from
    (an open-loop probe was then judged from the send) is judged again, not read as settled;
    one that says its basis is read as it stands."""
    folder = tmp_path / "p-c1"
    folder.mkdir()
    goal = tmp_path / "goal.json"
    goal.write_text(json.dumps(GOAL.to_dict()))
    (folder / "metrics.json").write_text('{"status": "done"}')
    judged = {"slo": GOAL.to_dict(), "verdict": "pass", "result": {"verdict": "pass"}}
    (folder / "slo.json").write_text(json.dumps(judged))
    assert settled_verdict(folder / "slo.json", folder / "metrics.json", goal, GOAL) is None
    judged["result"]["latency_from"] = "schedule"
    (folder / "slo.json").write_text(json.dumps(judged))
    assert settled_verdict(folder / "slo.json", folder / "metrics.json", goal, GOAL) == "pass"
