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
(the drafter's higher by its drafted tokens' share). A second run has the counter answer "not
supported" (power samples, within their stated error) and a CPU engine read RAPL on a machine
without it (`not measured`, the reason named). Editing a price reruns no cell; editing the
energy source reruns the cells whose source it changes.
"""

from __future__ import annotations

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
from tests.support.engines import left_behind
from tests.support.pipeline import planned_cells, run_snakemake, tiny_config, write_config

pytestmark = [pytest.mark.standin]

STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "energy"
SERVED = Device(
    "GPU-5a7d0000-0000-4000-8000-000000000000", "Stand-in H200", 90.0, 0.0, 20.0, 5e3, 250, 40
)
UNUSED = Device("GPU-5a7d1111-1111-4111-8111-111111111111", "Stand-in H200", 60.0, 250.0, 7.0)
WORK_LAW = Law(0.0, (SERVED, UNUSED))
# the counter "not supported": device 0's power a smooth wave, for the power samples to follow
WAVE_LAW = Law(0.0, (Device(SERVED.uuid, SERVED.name, 90.0, 60.0, 4.0, 5e3), UNUSED))
SPEED = LatencyLaw(step_ms=20, step_per_stream_ms=5, draft_accept=3, draft_max=2)
SOLO = ("none", "draft")
POINTS = (1, 2)
RESOLUTION_J = 1e-3


def cell(drafter: str = "none", workload: str = "solo", engine: str = "law") -> str:
    return f"smollm2-135m__{engine}__q4_1__{drafter}__{workload}"


def config(data: Path, energy: dict | None = None, cost: dict | None = None) -> dict:
    workload = {
        "dataset": {"kind": "jsonl", "path": str(data)},
        "max_tokens": 12,
        "max_seconds": 60,
        "grace_s": 5,
        "request_timeout_s": 20,
    }
    out = tiny_config(
        [
            {"matrix": {"model": ["smollm2-135m"], "engine": ["law"], "workload": ["solo"],
                        "drafter": list(SOLO)}},
            {"model": "smollm2-135m", "engine": "law", "workload": "sweep"},
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
    write_config(workdir, config(prompts(workdir)))
    env = environment(workdir, WORK_LAW)
    targets = [f"results/cells/{c}/metrics.json" for c in measured_cells()]
    proc = run_snakemake(workdir, *targets, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    yield workdir, env
    assert left_behind(str(SERVER)) == []


def measured_cells() -> list[str]:
    return [cell(d) for d in SOLO] + [cell(workload=f"sweep-c{c}") for c in POINTS]


def test_each_cells_and_points_joules_idle_and_j_per_token_are_the_closed_form(counter_run):
    workdir, _ = counter_run
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
    workdir, _ = counter_run
    base, drafting = (metrics(workdir, cell(d))["energy"] for d in SOLO)
    tokens, drafted = bench_work(workdir, cell("draft"))
    assert drafted > 0 and bench_work(workdir, cell("none"))[1] == 0
    gap = drafting["j_above_idle_per_output_token"] - base["j_above_idle_per_output_token"]
    assert gap == pytest.approx(SERVED.e_draft_mj / 1000 * drafted / tokens, abs=2e-3)


def test_a_series_points_each_hold_their_own_window_against_the_series_idle(counter_run):
    workdir, _ = counter_run
    points = [metrics(workdir, cell(workload=f"sweep-c{c}")) for c in POINTS]
    assert len({p["server_start"]["id"] for p in points}) == 1
    idles = [p["energy"]["idle_window"] for p in points]
    assert idles[0] == idles[1]  # the series' one baseline, read before its server started
    first, second = (p["energy"]["window"] for p in points)
    assert idles[0]["end_s"] < first["start_s"] < first["end_s"] < second["start_s"]


def test_a_price_reruns_no_cell_and_the_energy_source_reruns_the_cells_it_changes(counter_run):
    workdir, _ = counter_run
    data = workdir / "prompts.jsonl"
    everything = set(measured_cells())

    def planned(cfg: dict) -> set[str]:
        write_config(workdir, cfg)
        return planned_cells(workdir) & everything

    assert planned(config(data)) == set()
    assert planned(config(data, cost={"usd_per_hour": 3.5})) == set()
    assert planned(config(data, energy={"source": "nvml"})) == set()  # what auto chose
    assert planned(config(data, energy={"source": "rapl"})) == everything
    write_config(workdir, config(data))


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
    yield workdir
    assert left_behind(str(SERVER)) == []


def test_without_the_counter_the_power_samples_hold_the_closed_form_within_their_error(
    fallback_run,
):
    energy = metrics(fallback_run, cell())["energy"]
    assert (energy["status"], energy["method"]) == ("measured", "power samples"), energy
    assert [d["uuid"] for d in energy["devices"]] == [SERVED.uuid]
    start, end = energy["window"]["start_s"], energy["window"]["end_s"]
    exact = WAVE_LAW.joules(0, start, end)
    assert energy["valid"] is True and 0 < energy["error_j"] < 0.05 * exact
    assert abs(energy["joules"] - exact) <= energy["error_j"]
    assert energy["resolution_j"] is None and energy["cross_check"] is None
    assert 90.0 <= energy["idle_w"] <= 150.0  # the wave's range over the baseline's samples


def test_a_cpu_cell_without_rapl_reads_not_measured_with_the_reason(fallback_run):
    result = metrics(fallback_run, cell(engine="cpu"))
    assert result["status"] == "done", result.get("reason")
    energy = result["energy"]
    assert (energy["status"], energy["source"]) == ("not measured", "none")
    assert [t["source"] for t in energy["tried"]] == ["rapl"]  # not NVML: no GPU of its own
    assert energy["reason"].startswith("rapl: no powercap folder")
    assert all(energy[k] is None for k in ("joules", "idle_w", "j_per_output_token", "window"))
    # a done cell's metrics.json keeps the output contract's keys, `energy` among them
    contract = json.loads((CONTRACT_DIR / "contract.json").read_text())["metrics_json"]
    assert structure(result) == contract
