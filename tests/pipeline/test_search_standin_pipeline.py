"""A latency-goal search through the REAL pipeline (Snakemake, one checkpoint per probe, the walk
in the tables rule's input function, run_cell on a fresh server per probe, the tables) against a
STAND-IN server with a known latency law (`fixtures/sweeps/law_server.py`, launched as a `native`
llamacpp engine): no real server has a known law, and only a known law makes the right answer
known (`Law.max_concurrency_within`).

The law: a decode step takes 20 + 10 c ms for c streams: TPOT 30, 40, 50, 60, 70, 80 ... ms at
c = 1, 2, 3 ... With TPOT p90 <= 75 ms the search 1..16 walks c1, c2, c4 (pass), c8 (fail), c6
(fail), c5 (pass): largest passing 5, smallest failing 6. 40 prompts a probe (a p90's upper
bound needs 36 requests), 8 tokens each.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.sweeps.law import SERVER, Law
from tests.support.engines import left_behind
from tests.support.pipeline import (
    rules_run,
    run_snakemake,
    snakemake_argv,
    tiny_config,
    write_config,
)
from tests.support.run_end_table import end_table, table_rows

pytestmark = [pytest.mark.standin]

LAW = Law(step_ms=20, step_per_stream_ms=10)
MAX_TOKENS = 8
SERIES = "smollm2-135m__law__q4_1__none__goal"


def probe(c: int) -> str:
    return f"{SERIES}-c{c}"


def config(data: Path, limit_ms: float, law: Law = LAW, max_c: int = 16) -> dict:
    workloads = {
        "goal": {
            "dataset": {"kind": "jsonl", "path": str(data)},
            "num_prompts": 40,
            "max_tokens": MAX_TOKENS,
            "warmup_requests": 0,
            "max_seconds": 60,
            "grace_s": 5,
            "request_timeout_s": 20,
            "slo": {"tpot_ms": {"percentile": 90, "max": limit_ms}},
            "search": {"over": "concurrency", "min": 1, "max": max_c, "max_extensions": 1},
        }
    }
    out = tiny_config(
        [{"model": "smollm2-135m", "engine": "law", "workload": "goal"}], workloads=workloads
    )
    out["engines"] = {"law": law.engine()}
    out["checks"] = {"other_cpu_percent_of_core": 400}
    return out


def prompts(workdir: Path) -> Path:
    data = workdir / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"prompt {i} of the search"}) + "\n" for i in range(80))
    )
    return data


def slo_row(workdir: Path) -> dict:
    with open(workdir / "results/summary/slo.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 1
    return rows[0]


_JOB = re.compile(r"^(?:local)?(rule|checkpoint) (\w+):$")


def jobs(proc: subprocess.CompletedProcess, rule: str = "cell") -> list[str]:
    """The `cell` wildcard of each job of `rule` a run printed (the cell rule: the probes it
    measured; the checkpoint `cell_slo`: the probes it judged)."""
    out, current = [], None
    for line in (proc.stdout + proc.stderr).splitlines():
        line = line.strip()
        if match := _JOB.match(line):
            current = match.group(2)
        elif current == rule and line.startswith("wildcards: cell="):
            out.append(line.split("=", 1)[1])
    return out


def cells_run(proc: subprocess.CompletedProcess) -> list[str]:
    return jobs(proc, "cell")


def run(workdir: Path) -> subprocess.CompletedProcess:
    proc = run_snakemake(workdir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("search-standin")
    write_config(workdir, config(prompts(workdir), 75))
    proc = run(workdir)
    yield workdir, proc
    assert left_behind(str(SERVER)) == []


def test_the_search_finds_the_laws_largest_passing_load_and_stops_at_the_smallest_failing(
    searched,
):
    workdir, proc = searched
    expected = LAW.max_concurrency_within(75, c_max=16, max_tokens=MAX_TOKENS)
    assert expected == 5  # the law's answer, in closed form
    row = slo_row(workdir)
    assert row["series"] == SERIES and row["complete"] == "True"
    assert int(float(row["largest_passing"])) == expected
    assert int(float(row["smallest_failing"])) == expected + 1
    assert row["latency_from"] == "send"  # a closed loop: TTFT and E2E from each send
    assert sorted(cells_run(proc)) == sorted(probe(c) for c in (1, 2, 4, 8, 6, 5))
    for c in (1, 2, 4, 8, 6, 5):  # each probe judged beside its own measurement
        judged = json.loads((workdir / "results/cells" / probe(c) / "slo.json").read_text())
        assert judged["verdict"] == ("pass" if c <= expected else "fail"), c
        assert judged["result"]["latency_from"] == "send"
        metrics = json.loads((workdir / "results/cells" / probe(c) / "metrics.json").read_text())
        assert "slo" not in metrics  # the measurement alone: a goal is no part of it
    assert (workdir / "results/summary/slo_search.png").stat().st_size > 0
    assert "Latency goals" in (workdir / "results/report.html").read_text()  # its category
    front = (workdir / "results/summary/overview.html").read_text()  # the report's front page
    answer = front[front.index("<h2>Latency goal</h2>") : front.index("<h2>Figures</h2>")]
    shown = re.search(rf"<tr><td>{SERIES}</td>(.*?)</tr>", answer).group(1)
    # the first four columns: goal, axis, largest passing, smallest failing (a probe other work
    # disturbed adds a column after them: `rests_on_disturbed`)
    slo, over, largest, smallest = re.findall(r"<td[^>]*>([^<]*)</td>", shown)[:4]
    assert (over, largest, smallest) == ("concurrency", str(expected), str(expected + 1))
    assert slo == row["slo"] and 'alt="Latency goal: each probe of each search"' in answer
    assert (workdir / "results/summary/slo_drafter.csv").exists()


def test_each_probe_starts_a_server_of_its_own(searched):
    workdir, proc = searched
    assert "series_server" not in rules_run(proc)
    for c in (1, 2, 4, 8, 6, 5):
        metrics = json.loads((workdir / "results/cells" / probe(c) / "metrics.json").read_text())
        assert metrics.get("server_start") is None  # no shared server's record
        command = metrics["server_command"]
        assert command[command.index("--parallel") + 1] == str(c)  # slots sized to the probe
        assert metrics["ready_s"] is not None  # it waited for a server of its own


def test_a_finished_search_plans_nothing(searched):
    workdir, _ = searched
    proc = run_snakemake(workdir, "-n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert jobs(proc, "cell") == [] and jobs(proc, "cell_slo") == []
    assert "slo_tables" not in rules_run(proc)


def test_a_changed_limit_reruns_no_measured_probe_and_runs_only_the_new_ones(searched):
    workdir, _ = searched
    data = workdir / "prompts.jsonl"
    # 95 ms: c1..c4 pass, c8 fails (100), c6 (80) and then c7 (90) pass: one new probe, c7
    write_config(workdir, config(data, 95))
    proc = run(workdir)
    assert cells_run(proc) == [probe(7)]
    # every probe the new walk passes through re-judged (c5 is off it now), none re-measured
    assert sorted(jobs(proc, "cell_slo")) == sorted(probe(c) for c in (1, 2, 4, 8, 6, 7))
    row = slo_row(workdir)
    assert (int(float(row["largest_passing"])), int(float(row["smallest_failing"]))) == (7, 8)
    assert LAW.max_concurrency_within(95, c_max=16, max_tokens=MAX_TOKENS) == 7
    # and back: every probe the stricter goal needs is measured already
    write_config(workdir, config(data, 75))
    proc = run(workdir)
    assert cells_run(proc) == []
    row = slo_row(workdir)
    assert (int(float(row["largest_passing"])), int(float(row["smallest_failing"]))) == (5, 6)


def test_an_interrupted_search_runs_only_its_remaining_probes_next_time(tmp_path):
    write_config(tmp_path, config(prompts(tmp_path), 75))
    proc = subprocess.Popen(
        snakemake_argv(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        judged = []
        while time.monotonic() < deadline and len(judged) < 3:
            judged = list((tmp_path / "results/cells").glob(f"{SERIES}-c*/slo.json"))
            time.sleep(0.2)
        assert len(judged) >= 3, "the search never got three probes in"
        time.sleep(1.0)  # the fourth probe under way
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    done = {p.parent.name for p in (tmp_path / "results/cells").glob(f"{SERIES}-c*/slo.json")}
    assert 3 <= len(done) < 6
    again = run(tmp_path)
    ran = cells_run(again)
    assert set(ran) == {probe(c) for c in (1, 2, 4, 8, 6, 5)} - done
    assert int(float(slo_row(tmp_path)["largest_passing"])) == 5
    assert left_behind(str(SERVER)) == []


def test_a_non_monotone_law_is_flagged(tmp_path):
    """A bump at c = 4 (+50 ms: TPOT 110 there, 100 at c8). Under 115 ms the search passes up to
    its max, 8; under 105 ms it walks c1, c2, c4 (fail), c3 and stops at 3 / 4, and c8, measured
    before and still passing, lies above the failing c4: flagged."""
    law = Law(step_ms=20, step_per_stream_ms=10, bump_at=4, bump_ms=50)
    assert law.tpot_ms(4, max_tokens=MAX_TOKENS) == 110 and law.tpot_ms(8) == 100
    data = prompts(tmp_path)
    write_config(tmp_path, config(data, 115, law, max_c=8))
    run(tmp_path)
    assert slo_row(tmp_path)["non_monotone"] == ""
    write_config(tmp_path, config(data, 105, law, max_c=8))
    proc = run(tmp_path)
    assert cells_run(proc) == [f"{SERIES}-c3"]
    row = slo_row(tmp_path)
    assert (int(float(row["largest_passing"])), int(float(row["smallest_failing"]))) == (3, 4)
    assert row["non_monotone"] == "c4<c8" and "not monotone" in row["note"]
    assert law.max_concurrency_within(105, c_max=8, max_tokens=MAX_TOKENS) == 8  # what it missed


def test_a_failed_probe_stops_the_walk_and_is_retried_alone_next_run(tmp_path):
    """The stand-in refuses to start once for c4 (a wrapper around it, the one stand-in beyond
    the law server): the probe fails, the walk stops there (a search does not decide past a load
    it could not measure), and the next run retries that probe alone, through its failure
    counter, then goes on."""
    marker = tmp_path / "refused-once"
    wrapper = tmp_path / "flaky_law_server.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'case " $* " in *" --parallel 4 "*) if [ ! -e "{marker}" ]; then touch "{marker}"; '
        'echo "stand-in: refusing to start once" >&2; exit 1; fi;; esac\n'
        f'exec "{sys.executable}" "{SERVER}" "$@"\n'
    )
    cfg = config(prompts(tmp_path), 75)
    cfg["engines"]["law"]["binary"] = f"sh {wrapper}"
    write_config(tmp_path, cfg)
    first = run(tmp_path)
    assert cells_run(first) == [probe(1), probe(2), probe(4)]
    failed = json.loads((tmp_path / "results/cells" / probe(4) / "metrics.json").read_text())
    assert failed["status"] == "failed"
    row = slo_row(tmp_path)
    # the failure is said where the search is read, with its reason, not "searching: next c4"
    assert row["complete"] == "False" and row["note"].startswith("failed at c4: ")
    assert failed["reason"].splitlines()[0] in row["note"]
    # and where the run ends: every probe run, each with its status, counted in the outcome
    end = end_table(first.stderr)
    probes = {probe(1), probe(2), probe(4)}
    assert [(r.cell, r.words[0]) for r in table_rows(end) if r.cell in probes] == [
        (probe(1), "done"),
        (probe(2), "done"),
        (probe(4), "failed"),
    ]
    assert "1 of 3 cells failed." in end
    second = run(tmp_path)
    assert cells_run(second) == [probe(4), probe(8), probe(6), probe(5)]
    row = slo_row(tmp_path)
    assert (int(float(row["largest_passing"])), int(float(row["smallest_failing"]))) == (5, 6)
    assert left_behind(str(SERVER)) == []


def test_a_cut_short_probe_file_is_named_and_the_probe_redone_not_a_traceback(searched, tmp_path):
    """A copy of the finished search with c2's slo.json and c4's metrics.json cut short (a full
    disk, a killed copy): the run names each file, judges c2 again and measures c4 again, and
    the answer stands. Before, every later run stopped while the DAG was built."""
    workdir = tmp_path / "copy"
    shutil.copytree(searched[0], workdir, symlinks=True)
    cut = {
        workdir / "results/cells" / probe(2) / "slo.json",
        workdir / "results/cells" / probe(4) / "metrics.json",
    }
    for path in cut:
        path.write_text(path.read_text()[:30])
    dry = run_snakemake(workdir, "-n")  # names the first it meets, changes nothing
    assert dry.returncode == 0 and "Traceback" not in dry.stderr, dry.stderr[-3000:]
    slo_c2 = workdir / "results/cells" / probe(2) / "slo.json"
    assert f"{slo_c2.relative_to(workdir)} does not parse" in dry.stderr
    assert "a run removes it" in dry.stderr and all(path.exists() for path in cut)
    proc = run(workdir)
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said
    for path in cut:  # named as Snakemake names files: from the working directory
        assert f"{path.relative_to(workdir)} does not parse" in said
    assert cells_run(proc) == [probe(4)]
    assert {probe(2), probe(4)} <= set(jobs(proc, "cell_slo"))
    row = slo_row(workdir)
    assert (int(float(row["largest_passing"])), int(float(row["smallest_failing"]))) == (5, 6)
    assert left_behind(str(SERVER)) == []
