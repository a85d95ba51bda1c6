"""A small real sweep end to end: real llama-server (the cached pinned build), real GGUF
(SmolLM2-135M from its registry package), real ShareGPT prompts, two points (c1, c2) with and
without n-gram drafting. No stand-ins: what it shows is that the pipeline runs a sweep on a real
server (one start a series, its prefix cache really off); the exact figures are the stand-in
law's (test_sweep_standin_pipeline.py)."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.support.pipeline import (
    rules_run,
    run_snakemake,
    tiny_config,
    tiny_workload,
    write_config,
)
from tests.support.run_end_table import end_table, table_rows

pytestmark = pytest.mark.slow

POINTS = [1, 2]
PROMPT_EVAL = re.compile(r"prompt eval time = +[0-9.]+ ms / +([0-9]+) tokens")


def point(drafter: str, c: int) -> str:
    return f"smollm2-135m__llamacpp-cpu__q4_1__{drafter}__sweep-c{c}"


def metrics(workdir: Path, cell: str) -> dict:
    return json.loads((workdir / "results/cells" / cell / "metrics.json").read_text())


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("sweep-llamacpp")
    workloads = {"sweep": tiny_workload(concurrency=POINTS, num_prompts=4, warmup_requests=1)}
    config = tiny_config(
        [
            {
                "matrix": {
                    "model": ["smollm2-135m"],
                    "engine": ["llamacpp-cpu"],
                    "drafter": ["none", "ngram"],
                    "workload": ["sweep"],
                }
            }
        ],
        workloads=workloads,
    )
    write_config(workdir, config)
    proc = run_snakemake(workdir, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return workdir, proc


def test_each_series_runs_its_points_on_one_server_start(sweep_run):
    workdir, proc = sweep_run
    assert rules_run(proc).count("series_server") == 2
    for drafter in ("none", "ngram"):
        results = [metrics(workdir, point(drafter, c)) for c in POINTS]
        assert [r["status"] for r in results] == ["done", "done"], [
            r.get("reason") for r in results
        ]
        assert [r["concurrency"] for r in results] == POINTS
        assert len({r["server_start"]["id"] for r in results}) == 1
        assert [r["server_start"]["position"] for r in results] == [1, 2]
        assert all(r["completed"] == 4 and r["errors"] == 0 for r in results)
        # memory is each point's own, against the baseline taken before the one launch
        assert all(r["mem"]["baseline_available_gib"] > 0 for r in results)
        assert all(r["mem"]["server_rss_peak_gib"] > 0 for r in results)


def test_no_point_is_served_from_an_earlier_points_prefix_cache(sweep_run):
    """Both points send the dataset's first prompts: with the cache on, the second point's
    prompts would be mostly cached (llama-server logs only the tokens it evaluates). Each
    request's evaluated prompt must be its whole prompt."""
    workdir, _ = sweep_run
    for drafter in ("none", "ngram"):
        for c in POINTS:
            cell_dir = workdir / "results/cells" / point(drafter, c)
            records = [json.loads(line) for line in (cell_dir / "requests.jsonl").open()]
            prompts = Counter(r["prompt_tokens"] for r in records if r["status"] == "ok")
            evaluated = Counter(
                int(n) for n in PROMPT_EVAL.findall((cell_dir / "server.log").read_text())
            )
            assert sum(prompts.values()) == 5  # 4 measured and 1 warm-up
            assert evaluated == prompts, (drafter, c)


def test_the_sweep_tables_have_a_row_per_point(sweep_run):
    workdir, proc = sweep_run
    with open(workdir / "results/summary/sweeps.csv") as handle:
        rows = {row["cell"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {point(d, c) for d in ("none", "ngram") for c in POINTS}
    assert all(float(row["interactivity_tok_s"]) > 0 for row in rows.values())
    with open(workdir / "results/summary/spec_gain_sweep.csv") as handle:
        gains = list(csv.DictReader(handle))
    assert sorted(float(g["concurrency"]) for g in gains) == POINTS
    assert (workdir / "results/summary/pareto.png").stat().st_size > 0
    assert (workdir / "results/summary/spec_gain_sweep.png").stat().st_size > 0
    with open(workdir / "results/summary/spec_crossover.csv") as handle:
        (crossover,) = list(csv.DictReader(handle))
    front = (workdir / "results/summary/overview.html").read_text()  # the report's front page
    answer = front[front.index("<h2>Load sweeps</h2>") : front.index("<h2>Figures</h2>")]
    assert f"<td>{crossover['summary']}</td>" in answer
    assert answer.count('src="data:image/png;base64,') == 2  # the frontier and the gain
    # the terminal's end-of-run table: a line per point, then the outcome
    table = end_table(proc.stdout + proc.stderr)
    done = [r.cell for r in table_rows(table) if r.words[:1] == ["done"]]
    assert sorted(done) == sorted(rows)
    assert "4 of 4 cells done." in table
