"""Energy per token through the REAL pipeline (`snakemake --cores 1`, the cell rule, a sweep's
series server and its points) against two STAND-INS, because this machine has neither a GPU nor
a readable RAPL counter and only a known law gives closed forms:

- the stand-in `pynvml` (tests/fixtures/energy/pynvml, first on the PYTHONPATH Snakemake runs
  with, so every cell job and the series' server job import it): two devices; device 0, the one
  the server sees (`CUDA_VISIBLE_DEVICES: "0"` in its engine's env, which makes `auto` read
  NVML), follows the work law of nvml_law.py, an idle draw plus fixed millijoules per token
  streamed and per token drafted; device 1, outside the server's devices, a time law that
  must not be counted;
- the law stand-in server (tests/fixtures/sweeps/law_server.py, a `native` llamacpp engine),
  which writes each token it streams and drafts to the file the stand-in NVML reads.

So over each cell's and each sweep point's bench window its joules are the counter's closed form
there (the time law's part at the window's edges plus the tokens' part), the idle watts the time
law's over the idle window, and the J per output token above idle the known per-token energy
(the drafter's higher by its drafted tokens' share). The run has a drafter series beside its
base series (c1, c2) whose law makes the drafter three tokens a step at c1 and one at c2, each
step drafting two at 0.3 J a drafted token: at c1 it spreads the 90 W idle draw over three times
the tokens and saves about half the energy per token, at c2 it is no faster and costs about a
third more; so spec_gain, spec_gain_sweep and spec_crossover must read `saves` at c1 and `costs
more` at c2 (and for the standalone pair at c2), the change being the closed form's over the
windows the cells report; the energy table, the energy frontier and the dollar columns (a price
per kWh) follow from the same closed form. A second run has the counter answer "not supported"
(power samples, within their stated error) and a CPU engine read RAPL on a machine without it
(`not measured`, the reason named in metrics.json, the summary, the card and the end-of-run
table). Editing a price reruns no cell but redoes the tables; editing the energy source reruns
the cells whose source it changes.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from tests.fixtures.contract.make_contract import HERE as CONTRACT_DIR
from tests.fixtures.contract.make_contract import structure
from tests.fixtures.energy.nvml_law import (
    CONFIG_ENV,
    NO_COUNTER_ENV,
    WORK_ENV,
    Device,
    Law,
)
from tests.fixtures.sweeps.law import SERVER
from tests.fixtures.sweeps.law import Law as LatencyLaw
from tests.outputs.test_sweeps import PNG_MAGIC, brute_frontier
from tests.support.engines import left_behind
from tests.support.pipeline import (
    planned_cells,
    rules_run,
    run_snakemake,
    tiny_config,
    write_config,
)
from tests.support.run_end_table import end_table, table_rows
from workflow_scripts.outputs.card import build_card, render_markdown
from workflow_scripts.outputs.energy.change import COSTS_MORE, SAVES
from workflow_scripts.outputs.tables import summary_rows

pytestmark = [pytest.mark.standin]

STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "energy"
SERVED = Device(
    "GPU-5a7d0000-0000-4000-8000-000000000000", "Stand-in H200", 90.0, 0.0, 20.0, 5e3, 250, 300
)
UNUSED = Device("GPU-5a7d1111-1111-4111-8111-111111111111", "Stand-in H200", 60.0, 250.0, 7.0)
WORK_LAW = Law(0.0, (SERVED, UNUSED))
# the counter "not supported": device 0's power a smooth wave, for the power samples to follow
WAVE_LAW = Law(0.0, (Device(SERVED.uuid, SERVED.name, 90.0, 60.0, 4.0, 5e3), UNUSED))
# L(n) = max(1, 5 - 2n) tokens a step for n requests decoding, at most 3: 3 at c1, 1 at c2
SPEED = LatencyLaw(step_ms=20, step_per_stream_ms=5, draft_accept=5, draft_fall=2, draft_max=2)
SOLO = ("none", "draft")
POINTS = (1, 2)
RESOLUTION_J = 1e-3
KWH = {"usd_per_kwh": 0.12}
STATEMENTS = (
    "summary/energy.csv",
    "summary/spec_gain.csv",
    "summary/energy_frontier.csv",
    "summary/energy_frontier.png",
)


def cell(drafter: str = "none", workload: str = "solo", engine: str = "law") -> str:
    return f"smollm2-135m__{engine}__q4_1__{drafter}__{workload}"


def config(data: Path, energy: dict | None = None, cost: dict | None = None) -> dict:
    workload = {
        "dataset": {"kind": "jsonl", "path": str(data)},
        "max_tokens": 16,
        "max_seconds": 60,
        "grace_s": 5,
        "request_timeout_s": 20,
    }
    out = tiny_config(
        [
            {"matrix": {"model": ["smollm2-135m"], "engine": ["law"], "workload": ["solo"],
                        "drafter": list(SOLO)}},
            {"matrix": {"model": ["smollm2-135m"], "engine": ["law"], "workload": ["sweep"],
                        "drafter": list(SOLO)}},
        ],
        workloads={
            "solo": {**workload, "num_prompts": 6, "concurrency": 2, "warmup_requests": 1},
            "sweep": {**workload, "num_prompts": 4, "concurrency": list(POINTS),
                      "warmup_requests": 0},
        },
        drafters={"draft": {"kind": "ngram-simple", "n_max": SPEED.draft_max}},
    )  # fmt: skip
    out["engines"] = {"law": {**SPEED.engine(), "env": {"CUDA_VISIBLE_DEVICES": "0"}}}
    out["checks"] = {"other_cpu_percent_of_core": 400}
    # a sample every 50 ms: the steady state's time slices (two samples each) for its interval
    out["memory"] = {"interval_s": 0.05, "baseline_samples": 3}
    if energy is not None:
        out["energy"] = energy
    if cost is not None:
        out["cost"] = cost
    return out


def environment(workdir: Path, law: Law, **extra: str) -> dict[str, str]:
    """What Snakemake runs with: the stand-in pynvml first on PYTHONPATH (its jobs inherit it),
    its law, and the file the law server writes its work to."""
    path = os.pathsep.join(p for p in (str(STANDIN), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, CONFIG_ENV: law.to_env()}
    env[WORK_ENV] = str(workdir / "work.log")
    env.pop(NO_COUNTER_ENV, None)
    return {**env, **extra}


def prompts(workdir: Path) -> Path:
    data = workdir / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"prompt {i} of the run"}) + "\n" for i in range(8))
    )
    return data


def metrics(workdir: Path, cell_id: str) -> dict:
    return json.loads((workdir / "results/cells" / cell_id / "metrics.json").read_text())


def bench_work(workdir: Path, cell_id: str) -> tuple[int, int]:
    """(output tokens, drafted tokens) of the cell's measured requests, from its records."""
    lines = (workdir / "results/cells" / cell_id / "requests.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    measured = [r for r in records if not r["warmup"]]
    assert measured and all(r["status"] == "ok" for r in measured)
    drafted = sum((r.get("timings") or {}).get("draft_n", 0) for r in measured)
    return sum(r["completion_tokens"] for r in measured), drafted


@pytest.fixture(scope="module")
def counter_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("energy-counter")
    write_config(workdir, config(prompts(workdir), cost=KWH))
    env = environment(workdir, WORK_LAW)
    targets = [f"results/{path}" for path in STATEMENTS]
    proc = run_snakemake(workdir, *targets, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    yield workdir, env, proc
    assert left_behind(str(SERVER)) == []


def point(drafter: str, load: int) -> str:
    return cell(drafter, workload=f"sweep-c{load}")


def measured_cells() -> list[str]:
    return [cell(d) for d in SOLO] + [point(d, c) for d in SOLO for c in POINTS]


def test_each_cells_and_points_joules_idle_and_j_per_token_are_the_closed_form(counter_run):
    workdir, _, _ = counter_run
    for cell_id in measured_cells():
        result = metrics(workdir, cell_id)
        assert result["status"] == "done", result.get("reason")
        energy = result["energy"]
        assert (energy["status"], energy["source"], energy["method"]) == (
            "measured",
            "nvml",
            "counter",
        ), energy
        assert [d["uuid"] for d in energy["devices"]] == [SERVED.uuid]  # device 1 not counted
        start, end = energy["window"]["start_s"], energy["window"]["end_s"]
        tokens, drafted = bench_work(workdir, cell_id)
        assert energy["output_tokens"] == tokens == result["completion_tokens"]
        exact_mj = WORK_LAW.timed_mj(0, end) - WORK_LAW.timed_mj(0, start)
        exact_mj += SERVED.e_token_mj * tokens + SERVED.e_draft_mj * drafted
        assert energy["joules"] == pytest.approx(exact_mj / 1000, rel=1e-6), cell_id
        assert energy["j_per_output_token"] == pytest.approx(exact_mj / 1000 / tokens, rel=1e-6)
        idle_start, idle_end = energy["idle_window"]["start_s"], energy["idle_window"]["end_s"]
        idle_s = idle_end - idle_start
        idle_mj = WORK_LAW.timed_mj(0, idle_end) - WORK_LAW.timed_mj(0, idle_start)
        assert energy["idle_w"] == pytest.approx(idle_mj / 1000 / idle_s, rel=1e-6)
        # the idle draw is the law's 90 W to within the counter's mJ over the idle window
        assert abs(energy["idle_w"] - SERVED.idle_w) <= 2 * RESOLUTION_J / idle_s
        # above idle, what each token cost: 0.25 J, and 0.04 J per token drafted beside it
        per_token = (SERVED.e_token_mj * tokens + SERVED.e_draft_mj * drafted) / 1000 / tokens
        bound = 2 * RESOLUTION_J * (1 + (end - start) / idle_s) / tokens
        assert abs(energy["j_above_idle_per_output_token"] - per_token) <= bound, cell_id
        assert energy["valid"] is True and energy["resolution_j"] == RESOLUTION_J
        assert "lower bound" in energy["scope"]
        assert any("NVML's own timestamp" in note for note in energy["notes"])
        assert end - start >= result["duration_s"]  # the reads enclose the bench


def test_the_drafter_costs_its_drafted_tokens_more_per_token(counter_run):
    workdir, _, _ = counter_run
    base, drafting = (metrics(workdir, cell(d))["energy"] for d in SOLO)
    tokens, drafted = bench_work(workdir, cell("draft"))
    assert drafted > 0 and bench_work(workdir, cell("none"))[1] == 0
    gap = drafting["j_above_idle_per_output_token"] - base["j_above_idle_per_output_token"]
    assert gap == pytest.approx(SERVED.e_draft_mj / 1000 * drafted / tokens, abs=2e-3)


def gross_j_per_token(workdir: Path, cell_id: str) -> float:
    """The closed form of a cell's gross J per output token over the window it reports: the
    time law's joules between its edges and its tokens' and drafts' work, over its tokens."""
    energy = metrics(workdir, cell_id)["energy"]
    start, end = energy["window"]["start_s"], energy["window"]["end_s"]
    tokens, drafted = bench_work(workdir, cell_id)
    exact_mj = WORK_LAW.timed_mj(0, end) - WORK_LAW.timed_mj(0, start)
    exact_mj += SERVED.e_token_mj * tokens + SERVED.e_draft_mj * drafted
    return exact_mj / 1000 / tokens


def table(workdir: Path, name: str) -> list[dict[str, str]]:
    text = (workdir / "results" / "summary" / f"{name}.csv").read_text()
    return list(csv.DictReader(text.splitlines()))


# The drafter's change each pair must show: c1 (3 tokens a step) saves about half, c2 (1 token
# a step, 2 drafted at 0.3 J) costs about a third more; the standalone pair runs at c2.
PAIRS = {
    "c1": ((point("none", 1), point("draft", 1)), SAVES, (-70.0, -30.0)),
    "c2": ((point("none", 2), point("draft", 2)), COSTS_MORE, (20.0, 60.0)),
    "solo": ((cell("none"), cell("draft")), COSTS_MORE, (20.0, 60.0)),
}


def test_spec_gain_and_the_sweep_show_the_drafters_energy_change_and_its_verdict(counter_run):
    workdir, _, _ = counter_run
    gains = {row["drafter_cell"]: row for row in table(workdir, "spec_gain")}
    sweep = {row["drafter_cell"]: row for row in table(workdir, "spec_gain_sweep")}
    for name, ((base, drafting), verdict, (low, high)) in PAIRS.items():
        b, d = gross_j_per_token(workdir, base), gross_j_per_token(workdir, drafting)
        change = 100 * (d / b - 1)
        assert low < change < high, (name, change)  # the law's known amount
        rows = [gains[drafting]] + ([sweep[drafting]] if name != "solo" else [])
        for row in rows:
            assert float(row["energy_change_pct"]) == pytest.approx(change, rel=1e-6), name
            assert row["energy_verdict"] == verdict, (name, row)
            lo, hi = float(row["energy_change_lo_pct"]), float(row["energy_change_hi_pct"])
            assert lo < change < hi and float(row["energy_p_value"]) < 0.05
            assert row["energy_interval_source"].startswith("steady-state time slices")
        # above idle, what the drafter's own work costs: its drafts' share more, at every load
        tokens, drafted = bench_work(workdir, drafting)
        above = 100 * SERVED.e_draft_mj * drafted / tokens / SERVED.e_token_mj
        assert float(gains[drafting]["energy_above_idle_change_pct"]) == pytest.approx(
            above, abs=2.0
        )
    assert {sweep[point("draft", c)]["energy_family"] for c in POINTS} == {
        "Holm over 2 points of the series at 5 %"
    }
    (crossover,) = table(workdir, "spec_crossover")
    assert (crossover["last_saves_energy"], crossover["first_not_saving_energy"]) == ("1", "2")
    assert crossover["energy_summary"].startswith("saves energy up to c1, not from c2")


def test_the_energy_table_the_frontier_and_the_dollars_follow_the_closed_form(counter_run):
    workdir, _, proc = counter_run
    energy = {row["cell"]: row for row in table(workdir, "energy")}
    summary = {row["cell"]: row for row in table(workdir, "summary")}
    assert set(measured_cells()) <= set(energy)
    for cell_id in measured_cells():
        j = gross_j_per_token(workdir, cell_id)
        usd = j * KWH["usd_per_kwh"] / 3.6e6 * 1e6  # a million tokens' joules, in kWh, priced
        for row in (energy[cell_id], summary[cell_id]):
            assert float(row["j_per_output_token"]) == pytest.approx(j, rel=1e-6)
            assert float(row["usd_per_m_output_tokens"]) == pytest.approx(usd, rel=1e-6)
            assert (row["cost_basis"], row["cost_price"]) == ("usd_per_kwh", "0.12")
        assert energy[cell_id]["source"] == "nvml" and energy[cell_id]["devices"] == (
            "GPU 0 (Stand-in H200)"
        )
        assert "a lower bound on the machine's" in energy[cell_id]["note"]
    # the frontier: exactly the sweep points no other beats on tokens/J and interactivity
    points = [row for row in table(workdir, "sweeps")]
    xy = [(float(r["interactivity_tok_s"]), float(r["output_tokens_per_j"])) for r in points]
    frontier = [row["cell"] for row in table(workdir, "energy_frontier")]
    assert sorted(frontier) == sorted(points[i]["cell"] for i in brute_frontier(xy))
    assert point("draft", 1) in frontier  # three tokens a step and half the joules: on it
    figure = workdir / "results" / "summary" / "energy_frontier.png"
    assert figure.read_bytes()[:8] == PNG_MAGIC
    # the table the run ended with: J per output token beside each cell, no not-measured line
    end = end_table(proc.stdout + proc.stderr)
    assert end[0].endswith("J/out tok") and not any("not measured" in line for line in end)
    shown = {r.cell: r.words for r in table_rows(end)}
    for cell_id in measured_cells():
        assert shown[cell_id][-1] == f"{float(energy[cell_id]['j_per_output_token']):.4f}"


def test_a_series_points_each_hold_their_own_window_against_the_series_idle(counter_run):
    workdir, _, _ = counter_run
    points = [metrics(workdir, point("none", c)) for c in POINTS]
    assert len({p["server_start"]["id"] for p in points}) == 1
    idles = [p["energy"]["idle_window"] for p in points]
    assert idles[0] == idles[1]  # the series' one baseline, read before its server started
    first, second = (p["energy"]["window"] for p in points)
    assert idles[0]["end_s"] < first["start_s"] < first["end_s"] < second["start_s"]


def test_a_price_reruns_no_cell_and_the_energy_source_reruns_the_cells_it_changes(counter_run):
    workdir, _, _ = counter_run
    data = workdir / "prompts.jsonl"
    everything = set(measured_cells())

    def planned(cfg: dict) -> set[str]:
        write_config(workdir, cfg)
        return planned_cells(workdir) & everything

    assert planned(config(data, cost=KWH)) == set()
    assert planned(config(data, cost={"usd_per_hour": 3.5})) == set()
    assert planned(config(data, cost=KWH, energy={"source": "nvml"})) == set()  # what auto chose
    assert planned(config(data, cost=KWH, energy={"source": "rapl"})) == everything
    write_config(workdir, config(data, cost=KWH))


def test_a_price_edit_redoes_the_tables_that_show_dollars(counter_run):
    """The price is a param of the tables' rules (never of a cell's): a dry run after editing
    it plans the summary's and the sweeps' tables again, and nothing without an edit."""
    workdir, _, _ = counter_run
    data = workdir / "prompts.jsonl"
    targets = [f"results/{path}" for path in STATEMENTS]

    def planned(cost: dict) -> set[str]:
        write_config(workdir, config(data, cost=cost))
        proc = run_snakemake(workdir, "-n", *targets)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return set(rules_run(proc))

    assert planned(KWH) == set()
    assert planned({"usd_per_hour": 3.5}) == {"aggregate", "sweeps"}
    write_config(workdir, config(data, cost=KWH))


@pytest.fixture(scope="module")
def fallback_run(tmp_path_factory):
    """The counter "not supported" on the served device; a CPU engine (nothing says it uses a
    GPU) reads RAPL, and this machine has none."""
    workdir = tmp_path_factory.mktemp("energy-fallback")
    out = config(prompts(workdir))
    out["engines"]["cpu"] = SPEED.engine()
    out["cells"] = [
        {"model": "smollm2-135m", "engine": "law", "workload": "solo"},
        {"model": "smollm2-135m", "engine": "cpu", "workload": "solo"},
    ]
    write_config(workdir, out)
    env = environment(workdir, WAVE_LAW, **{NO_COUNTER_ENV: "1"})
    env["LLMBENCH_POWERCAP_ROOT"] = str(workdir / "no-powercap")
    cells = [cell(), cell(engine="cpu")]
    proc = run_snakemake(workdir, *[f"results/cells/{c}/metrics.json" for c in cells], env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    yield workdir, proc
    assert left_behind(str(SERVER)) == []


def test_without_the_counter_the_power_samples_hold_the_closed_form_within_their_error(
    fallback_run,
):
    energy = metrics(fallback_run[0], cell())["energy"]
    assert (energy["status"], energy["method"]) == ("measured", "power samples"), energy
    assert [d["uuid"] for d in energy["devices"]] == [SERVED.uuid]
    start, end = energy["window"]["start_s"], energy["window"]["end_s"]
    exact = WAVE_LAW.joules(0, start, end)
    assert energy["valid"] is True and 0 < energy["error_j"] < 0.05 * exact
    assert abs(energy["joules"] - exact) <= energy["error_j"]
    assert energy["resolution_j"] is None and energy["cross_check"] is None
    assert 90.0 <= energy["idle_w"] <= 150.0  # the wave's range over the baseline's samples


def test_a_cpu_cell_without_rapl_reads_not_measured_with_the_reason(fallback_run):
    result = metrics(fallback_run[0], cell(engine="cpu"))
    assert result["status"] == "done", result.get("reason")
    energy = result["energy"]
    assert (energy["status"], energy["source"]) == ("not measured", "none")
    assert [t["source"] for t in energy["tried"]] == ["rapl"]  # not NVML: no GPU of its own
    assert energy["reason"].startswith("rapl: no powercap folder")
    assert all(energy[k] is None for k in ("joules", "idle_w", "j_per_output_token", "window"))
    # a done cell's metrics.json keeps the output contract's keys, `energy` among them
    contract = json.loads((CONTRACT_DIR / "contract.json").read_text())["metrics_json"]
    assert structure(result) == contract


def test_not_measured_reads_with_its_reason_in_the_summary_the_card_and_the_run_end(
    fallback_run,
):
    """The CPU cell's own metrics.json (not measured: no RAPL here) through the summary's row,
    its card, and the table the run ended with (printed by the Snakefile's handler)."""
    workdir, proc = fallback_run
    cpu = cell(engine="cpu")
    result = metrics(workdir, cpu)
    reason = result["energy"]["reason"]
    (row,) = summary_rows([result])
    assert (row["energy_status"], row["energy_note"]) == ("not measured", f"not measured: {reason}")
    assert row["j_per_output_token"] is None and row["usd_per_m_output_tokens"] is None
    card = render_markdown(build_card(cell_of(workdir, cpu), result))
    assert f"Not measured: {reason}." in card[card.index("## Energy") :]
    table = end_table(proc.stdout + proc.stderr)
    said = " ".join(line.strip() for line in table)
    assert f"energy of {cpu}: not measured: rapl: no powercap folder" in said
    assert {r.cell for r in table_rows(table)} == {cell(), cpu}
    assert table[0].endswith("J/out tok")  # the law cell's, read from its power samples


def cell_of(workdir: Path, cell_id: str):
    """The cell as the card rule's params carry it, from the run's own config."""
    from workflow_scripts.config.matrix import load_cells

    return next(c for c in load_cells(workdir / "matrix.yaml") if c.id == cell_id)
