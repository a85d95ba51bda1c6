"""`python -m workflow_scripts.compare A B` on two fixture result sets: B is the fixtures with
one cell's requests made 1.5x slower (metrics recomputed from the records), so that cell must
read `slower` and fail `--fail-above`, every other cell `no detectable difference`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from tests.support.outputs import BASE, BASE_C4, DRAFTER, FAILED, FIXTURES, REPO
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.records import RequestRecord
from workflow_scripts.outputs import compare_runs


def results_copy(tmp_path, name: str):
    folder = tmp_path / name
    shutil.copytree(FIXTURES / "cells", folder / "cells")
    return folder


def slow_down(results, cell: str, factor: float) -> None:
    """Every time in the cell's records times `factor`; metrics.json recomputed from them."""
    folder = results / "cells" / cell
    records = [
        RequestRecord.from_dict(json.loads(line))
        for line in (folder / "requests.jsonl").read_text().splitlines()
    ]
    for r in records:
        r.sent_s *= factor
        r.ttft_s = r.ttft_s * factor if r.ttft_s is not None else None
        r.e2e_s = r.e2e_s * factor if r.e2e_s is not None else None
        r.chunk_times_s = [t * factor for t in r.chunk_times_s]
    (folder / "requests.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    metrics = json.loads((folder / "metrics.json").read_text())
    metrics.update(compute_metrics(records))
    (folder / "metrics.json").write_text(json.dumps(metrics))


@pytest.fixture
def result_sets(tmp_path):
    a, b = results_copy(tmp_path, "a"), results_copy(tmp_path, "b")
    slow_down(b, BASE, 1.5)
    return a, b


def test_table_has_every_cell_done_in_both_with_interval_and_verdict(result_sets):
    a, b = result_sets
    table = compare_runs.compare_table(compare_runs.read_results(a), compare_runs.read_results(b))
    rows = table.set_index("cell")
    assert set(rows.index) == {BASE, DRAFTER, BASE_C4}  # the failed cell compares with nothing
    base = rows.loc[BASE]
    assert base["decode_change_pct"] == pytest.approx(100 * (1 / 1.5 - 1))
    assert base["decode_lo_pct"] <= base["decode_change_pct"] <= base["decode_hi_pct"]
    assert base["decode_verdict"] == "slower" and base["tpot_verdict"] == "slower"
    assert base["basis"] == "paired, 6 prompts"
    for cell in (DRAFTER, BASE_C4):
        assert rows.loc[cell, "decode_verdict"] == "no detectable difference"
        assert rows.loc[cell, "decode_change_pct"] == pytest.approx(0.0)
    assert FAILED not in rows.index


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workflow_scripts.compare", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def test_cli_writes_markdown_and_csv_and_fails_above_the_threshold(result_sets, tmp_path):
    a, b = result_sets
    proc = run_cli(a, b, "--fail-above", "10")
    assert proc.returncode == 1, proc.stderr
    assert f"{BASE}: decode_tok_s -33.3 %" in proc.stderr
    assert proc.stdout.startswith("# Comparison of two result sets")
    assert f"| {BASE} " in proc.stdout and "slower" in proc.stdout
    # a threshold above the change: significant, but within what CI allows
    assert run_cli(a, b, "--fail-above", "60").returncode == 0
    # A against itself: nothing changed, nothing fails
    same = run_cli(a, a, "--fail-above", "0", "--out", tmp_path / "same.csv")
    assert same.returncode == 0, same.stderr
    table = pd.read_csv(tmp_path / "same.csv")
    assert set(table["decode_verdict"]) == {"no detectable difference"}


def test_cells_in_one_set_only_are_listed(result_sets, tmp_path):
    a, b = result_sets
    shutil.rmtree(b / "cells" / BASE_C4)
    proc = run_cli(a, b, "--out", tmp_path / "cmp.md")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "cmp.md").read_text()
    assert f"- only in A: {BASE_C4}" in text


def test_without_records_there_is_a_change_but_no_interval(result_sets):
    a, b = result_sets
    for folder in (a, b):
        for path in folder.glob("cells/*/requests.jsonl"):
            path.unlink()
    table = compare_runs.compare_table(compare_runs.read_results(a), compare_runs.read_results(b))
    base = table.set_index("cell").loc[BASE]
    assert base["decode_change_pct"] == pytest.approx(100 * (1 / 1.5 - 1))
    assert pd.isna(base["decode_lo_pct"]) and pd.isna(base["decode_verdict"])
    assert compare_runs.regressions(table, 10) == []  # no verdict, no failure


def test_a_results_folder_without_cells_is_an_error(tmp_path):
    proc = run_cli(tmp_path, tmp_path)
    assert proc.returncode == 2 and "no cells/ folder" in proc.stderr


def test_cli_draws_the_change_per_cell(result_sets, tmp_path):
    a, b = result_sets
    proc = run_cli(a, b, "--out", tmp_path / "cmp.md", "--figure", tmp_path / "cmp.png")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cmp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (tmp_path / "cmp.svg").read_bytes()[:2000]
    table = compare_runs.compare_table(compare_runs.read_results(a), compare_runs.read_results(b))
    fig = compare_runs.change_figure(table)
    red = [line for line in fig.axes[0].lines if line.get_color() == "#c44e52"]
    assert red and red[-1].get_xdata()[0] == pytest.approx(100 * (1 / 1.5 - 1))  # BASE: slower
