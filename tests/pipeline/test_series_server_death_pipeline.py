"""A series' shared server that dies, and a Snakemake SIGKILLed mid-series, through the REAL
pipeline (`snakemake --cores 1`, the series' service job, run_cell on the shared server) against
the STAND-IN law server (`fixtures/sweeps/law_server.py`, a `native` llamacpp engine): a real
llama-server cannot be made to die on demand at a known point of a load, and the stand-in's
/metrics says how many tokens it has served, so the test kills it mid-load, not before or after.
The processes a run started are found through its series' record (pids and start times), never
machine-wide.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import requests

from tests.fixtures.sweeps.law import Law
from tests.support.pipeline import (
    rules_run,
    run_snakemake,
    snakemake_argv,
    tiny_config,
    write_config,
)

pytestmark = [pytest.mark.standin]

LAW = Law(step_ms=60, step_per_stream_ms=0)  # 13 tokens ~ 0.8 s a request: a load of ~10 s
MAX_TOKENS = 13
SERIES = "smollm2-135m__law__q4_1__none__sweep"


def config(data: Path) -> dict:
    workloads = {
        "sweep": {
            "dataset": {"kind": "jsonl", "path": str(data)},
            "num_prompts_per_concurrency": 12,
            "concurrency": [1, 2],
            "max_tokens": MAX_TOKENS,
            "warmup_requests": 0,
            "max_seconds": 120,
            "grace_s": 5,
            "request_timeout_s": 20,
        }
    }
    matrix = {"model": ["smollm2-135m"], "engine": ["law"], "drafter": ["none"]}
    out = tiny_config([{"matrix": {**matrix, "workload": ["sweep"]}}], workloads=workloads)
    out["engines"] = {"law": LAW.engine()}
    out["checks"] = {"other_cpu_percent_of_core": 400}
    return out


def setup(workdir: Path) -> None:
    data = workdir / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(40)))
    write_config(workdir, config(data))


def series_record(workdir: Path) -> dict:
    try:
        return json.loads((workdir / f"results/cells/.series/{SERIES}.json").read_text())
    except (OSError, ValueError):
        return {}


def metrics(workdir: Path, c: int) -> dict:
    return json.loads((workdir / f"results/cells/{SERIES}-c{c}/metrics.json").read_text())


def served_tokens(base_url: str) -> float:
    """The tokens the stand-in has generated so far (its /metrics counter)."""
    try:
        text = requests.get(base_url + "/metrics", timeout=2).text
    except requests.RequestException:
        return 0.0
    for line in text.splitlines():
        if line.startswith("llamacpp:tokens_predicted_total "):
            return float(line.split()[1])
    return 0.0


def mid_load(workdir: Path, runner: subprocess.Popen, timeout_s: float = 300) -> dict:
    """The series' `ready` record once its server has answered 3 whole requests of a point."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert runner.poll() is None, "the run ended before its series' server was under load"
        record = series_record(workdir)
        if record.get("state") == "ready" and served_tokens(record["base_url"]) >= 3 * MAX_TOKENS:
            return record
        time.sleep(0.05)
    raise AssertionError(f"no load on the series' server within {timeout_s} s: {record}")


def process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def running(proc: psutil.Process | None) -> bool:
    try:
        return proc is not None and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def still_running(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in procs if running(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_a_point_whose_server_dies_mid_load_fails_naming_the_death(tmp_path):
    """c1 runs first; its server is SIGKILLed after 3 of its 12 requests: c1 fails (though
    requests completed) naming the death, c2 (its turn after the death) fails with the same
    reason, and neither is on the frontier."""
    setup(tmp_path)
    runner = subprocess.Popen(
        snakemake_argv(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        record = mid_load(tmp_path, runner)
        os.kill(record["pid"], signal.SIGKILL)
        out, _ = runner.communicate(timeout=300)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert runner.returncode == 0, out[-3000:]
    c1, c2 = metrics(tmp_path, 1), metrics(tmp_path, 2)
    assert c1["status"] == "failed" and c2["status"] == "failed", (c1["reason"], c2["reason"])
    start = f"the series' server ({record['start_id']}): server was killed by "
    assert c1["reason"].startswith("ServerError: " + start) and "SIGKILL" in c1["reason"]
    assert "last log lines" in c1["reason"]
    assert c2["reason"] == c1["reason"]
    completed = [
        r
        for r in map(json.loads, (tmp_path / f"results/cells/{SERIES}-c1/requests.jsonl").open())
        if r.get("error") is None
    ]
    assert len(completed) >= 1  # it died mid-load: requests had completed
    pareto = (tmp_path / "results/summary/pareto.csv").read_text()
    assert f"{SERIES}-c1" not in pareto and f"{SERIES}-c2" not in pareto


def test_a_sigkilled_snakemake_leaves_no_series_job_or_server(tmp_path):
    """`kill -9` of Snakemake while a point loads the series' server: the series' job and its
    server end by themselves, as do the points; the next run (after `--unlock`, as Snakemake
    asks) starts exactly one server, and all its points are done on it."""
    setup(tmp_path)
    runner = subprocess.Popen(
        snakemake_argv(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    jobs: list[psutil.Process] = []
    try:
        record = mid_load(tmp_path, runner)
        jobs = psutil.Process(runner.pid).children(recursive=True)
        series_job, server = process(record["job_pid"]), process(record["pid"])
        assert series_job in jobs and server in jobs
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        left = still_running([series_job, server], timeout_s=60)
        assert left == [], [p.cmdline() for p in left]
        assert still_running(jobs, timeout_s=120) == []  # nothing of the killed run stays
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        for proc in still_running(jobs, timeout_s=0):
            proc.kill()
    # what a user does after a killed Snakemake: its lock on the folder stays behind
    assert run_snakemake(tmp_path, "--unlock").returncode == 0
    proc = run_snakemake(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert rules_run(proc).count("series_server") == 1
    starts = [metrics(tmp_path, c) for c in (1, 2)]
    assert [m["status"] for m in starts] == ["done", "done"], [m["reason"] for m in starts]
    assert len({m["server_start"]["id"] for m in starts}) == 1
    assert starts[0]["server_start"]["pid"] != record["pid"]
