"""A load sweep through the REAL pipeline (Snakemake, the series' service job, run_cell on a shared
server, the tables) against a STAND-IN server with a known latency law
(`fixtures/sweeps/law_server.py`, launched as a `native` llamacpp engine): no real server has one,
and only a known law makes each point's TPOT, the frontier and the drafter's crossover known in
closed form (`fixtures/sweeps/law.py`). The stand-in drafter's gain falls with load.

The law: a decode step takes 20 + 5 n ms for n streams (TPOT 25, 30, 40, 60 ms at c = 1, 2, 4,
8); with the drafter 30 + 10 n ms and max(1, 5 - n) tokens a step (TPOT 10, 16.7, 70, 110 ms):
faster at c = 1 and 2, slower from c = 4. Its drafter alters the answers to a tenth of the
prompts (by hash) from token 2 on, and each base point has its floor run: the points' agreements
are known, so each point's Fisher p-value, their Holm adjustment over the series and the
series' pooled verdict are known in closed form (the series' verdicts as a family).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.fixtures.sweeps.law import SERVER, Law
from tests.support.engines import left_behind
from tests.support.pipeline import (
    planned_cells,
    rules_run,
    run_snakemake,
    tiny_config,
    write_config,
)
from workflow_scripts.fidelity.agreement import fisher_lower_p
from workflow_scripts.fidelity.pairs import floor_id
from workflow_scripts.verdicts.families import Stratum, holm, stratified_lower_p

pytestmark = [pytest.mark.standin]

LAW = Law(
    step_ms=20,
    step_per_stream_ms=5,
    draft_step_ms=30,
    draft_step_per_stream_ms=10,
    draft_accept=5,
    draft_fall=1,
    draft_max=4,
    alter_share=0.1,
    alter_after=2,
)
MAX_TOKENS = 13
POINTS = [1, 2, 4, 8]


def series(drafter: str) -> str:
    return f"smollm2-135m__law__q4_1__{drafter}__sweep"


def point(drafter: str, c: int) -> str:
    return f"{series(drafter)}-c{c}"


def config(data: Path, points: list[int]) -> dict:
    workloads = {
        "sweep": {
            "dataset": {"kind": "jsonl", "path": str(data)},
            "num_prompts_per_concurrency": 8,  # 8 paired prompts at c1: a verdict can be reached
            "concurrency": points,
            "max_tokens": MAX_TOKENS,
            "warmup_requests": 0,
            "max_seconds": 60,
            "grace_s": 5,
            "request_timeout_s": 20,
        }
    }
    out = tiny_config(
        [
            {
                "matrix": {
                    "model": ["smollm2-135m"],
                    "engine": ["law"],
                    "drafter": ["none", "standin-draft"],
                    "workload": ["sweep"],
                },
                "fidelity_floor": True,
            }
        ],
        workloads=workloads,
        drafters={"standin-draft": {"kind": "ngram-simple", "n_max": LAW.draft_max}},
    )
    out["engines"] = {"law": LAW.engine()}
    out["checks"] = {"other_cpu_percent_of_core": 400}
    return out


def metrics(workdir: Path, cell_id: str) -> dict:
    return json.loads((workdir / "results/cells" / cell_id / "metrics.json").read_text())


def table(workdir: Path, name: str) -> list[dict]:
    with open(workdir / "results/summary" / name) as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("sweep-standin")
    data = workdir / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"prompt {i} of the sweep"}) + "\n" for i in range(80))
    )
    write_config(workdir, config(data, POINTS))
    proc = run_snakemake(workdir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    yield workdir, data, proc
    assert left_behind(str(SERVER)) == []


def test_each_point_measures_the_law(sweep_run):
    workdir, _, _ = sweep_run
    for drafter, drafting in (("none", False), ("standin-draft", True)):
        for c in POINTS:
            result = metrics(workdir, point(drafter, c))
            assert result["status"] == "done", result.get("reason")
            assert result["concurrency"] == c and result["series"] == series(drafter)
            expected = LAW.tpot_ms(c, drafter=drafting, max_tokens=MAX_TOKENS)
            measured = result["tpot_ms"]["median"]
            assert abs(measured - expected) <= max(2.0, 0.05 * expected), (drafter, c)


def test_a_series_starts_its_server_once_and_its_points_take_turns_in_order(sweep_run):
    workdir, _, proc = sweep_run
    assert rules_run(proc).count("series_server") == 3  # the base's floor runs: a series too
    for drafter in ("none", "standin-draft"):
        starts = [metrics(workdir, point(drafter, c))["server_start"] for c in POINTS]
        assert len({s["id"] for s in starts}) == 1 and len({s["pid"] for s in starts}) == 1
        assert [s["position"] for s in starts] == [1, 2, 3, 4]
        # the one server was started for the point with the most streams (its slots)
        assert {s["launch_cell"] for s in starts} == {point(drafter, 8)}
        command = metrics(workdir, point(drafter, 1))["server_command"]
        assert "--no-cache-prompt" in command and command[command.index("--parallel") + 1] == "8"


def test_the_frontier_is_exactly_the_non_dominated_points(sweep_run):
    workdir, _, _ = sweep_run
    law_points = {
        point(d, c): (
            LAW.interactivity(c, drafter=d != "none", max_tokens=MAX_TOKENS),
            LAW.decode_tok_s(c, drafter=d != "none", max_tokens=MAX_TOKENS),
        )
        for d in ("none", "standin-draft")
        for c in POINTS
    }
    expected = {
        cell
        for cell, (x, y) in law_points.items()
        if not any((x2 >= x and y2 >= y) and (x2 > x or y2 > y) for x2, y2 in law_points.values())
    }
    assert expected == {point("standin-draft", 1), point("standin-draft", 2), point("none", 8)}
    assert {row["cell"] for row in table(workdir, "pareto.csv")} == expected
    sweeps = {row["cell"]: row for row in table(workdir, "sweeps.csv")}
    assert set(sweeps) == set(law_points)


def test_the_crossover_is_where_the_law_puts_it(sweep_run):
    workdir, _, _ = sweep_run
    (row,) = table(workdir, "spec_crossover.csv")
    assert row["series"] == series("standin-draft")
    assert float(row["last_faster"]) == 2 and float(row["first_not_faster"]) == 4
    gains = {float(r["concurrency"]): r for r in table(workdir, "spec_gain_sweep.csv")}
    assert LAW.crossover_concurrency() is not None and 2 < LAW.crossover_concurrency() < 4
    for c in POINTS:
        base = LAW.decode_tok_s(c, max_tokens=MAX_TOKENS)
        drafted = LAW.decode_tok_s(c, drafter=True, max_tokens=MAX_TOKENS)
        expected = 100 * (drafted / base - 1)
        assert abs(float(gains[c]["decode_gain_pct"]) - expected) <= 10, c
        assert gains[c]["verdict"] == ("faster" if c < 4 else "slower"), c


def test_adding_a_point_runs_only_it_and_a_retried_point_runs_alone(sweep_run):
    workdir, data, _ = sweep_run
    assert planned_cells(workdir) == set()  # a finished sweep plans nothing
    write_config(workdir, config(data, [1, 2, 3, 4, 8]))
    assert planned_cells(workdir) == {
        point("none", 3),
        point("standin-draft", 3),
        floor_id(point("none", 3)),
    }
    write_config(workdir, config(data, POINTS))
    # what a failed point does (cell.failures.bump_failures): its counter moves, so the next run
    # retries it, and only it (with a fresh start of its series' server)
    failures = workdir / "results/failures"
    failures.mkdir(exist_ok=True)
    (failures / f"{point('none', 2)}.count").write_text("1\n")
    proc = run_snakemake(workdir, "-n")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert planned_cells(workdir) == {point("none", 2)}
    assert rules_run(proc).count("series_server") == 1


def test_the_series_verdicts_are_one_family_and_its_outputs_one_pooled_verdict(sweep_run):
    """Each point sends the first 8c prompts; the drafter alters a tenth of them (by hash): 6 of
    8, 13 of 16, 27 of 32 and 57 of 64 identical against floors that agree on all. Alone c4 and
    c8 are below their floors (p = 0.026, 0.0066); as one of 4 points only c8 is (Holm 0.079,
    0.026); pooled over the points the series is changed (p = 4.6e-06), and the points disagree.
    The crossover is drawn from the family's verdicts."""
    workdir, data, _ = sweep_run
    prompts = [json.loads(line)["prompt"] for line in data.read_text().splitlines()]
    known = [
        (LAW.expected_identical(prompts[: 8 * c], MAX_TOKENS), 8 * c) for c in POINTS
    ]  # (identical, compared) at each point, against floors that agree on every prompt
    assert known == [(6, 8), (13, 16), (27, 32), (57, 64)]
    own = [fisher_lower_p(same, n, n, n) for same, n in known]
    adjusted = holm(own)
    pooled = stratified_lower_p([Stratum(same, n, n, n) for same, n in known])
    gains = table(workdir, "spec_gain_sweep.csv")
    assert [float(g["outputs_p_value"]) for g in gains] == pytest.approx(own)
    assert [float(g["outputs_p_adjusted"]) for g in gains] == pytest.approx(adjusted)
    assert [g["outputs_unadjusted"] for g in gains] == ["unchanged"] * 2 + ["changed"] * 2
    assert [g["outputs"] for g in gains] == ["unchanged"] * 3 + ["changed"]
    assert {g["outputs_pooled"] for g in gains} == {"changed"}
    assert float(gains[0]["outputs_pooled_p_value"]) == pytest.approx(pooled)
    # the gain: Holm over the points' randomization p-values, and the verdict from it
    assert [float(g["p_adjusted"]) for g in gains] == pytest.approx(
        holm([float(g["p_value"]) for g in gains])
    )
    assert {g["family"] for g in gains} == {"Holm over 4 points of the series at 5 %"}
    for g in gains:
        judged = float(g["p_adjusted"]) < 0.05
        assert g["verdict"] == (g["verdict_unadjusted"] if judged else "no detectable difference")
    (row,) = table(workdir, "spec_crossover.csv")
    faster = [float(g["concurrency"]) for g in gains if g["verdict"] == "faster"]
    assert float(row["last_faster"]) == max(faster)
    assert row["outputs_verdict"] == "changed"
    assert float(row["outputs_p_value"]) == pytest.approx(pooled)
    assert "points disagree: not detectably changed at c1, c2 and c4" in row["outputs"]
    assert "below the floor on its own at c4 (p = 0.026, Holm p = 0.079)" in row["outputs"]
    fidelity = {r["cell"]: r for r in table(workdir, "fidelity.csv")}
    c4 = fidelity[point("standin-draft", 4)]
    assert (c4["verdict"], c4["verdict_unadjusted"]) == ("unchanged", "changed")
    assert float(c4["p_adjusted"]) == pytest.approx(adjusted[2])
    assert c4["series_verdict"] == "changed" and c4["series"] == series("standin-draft")
    cards = workdir / "results/cells"
    card4 = (cards / point("standin-draft", 4) / "card.md").read_text()
    assert "Its series, pooled" in card4 and "changed (p = 4.6e-06)" in card4
    assert "speed-up is not a free one" not in card4
    assert (
        "speed-up is not a free one" in (cards / point("standin-draft", 8) / "card.md").read_text()
    )
    sweeps_md = (workdir / "results/summary/sweeps.md").read_text()
    assert "Its greedy outputs against its base's: " in sweeps_md
