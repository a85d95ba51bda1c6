"""The tiny matrix through a real single-node Slurm (tests/support/slurm_cluster.py) with
Snakemake's Slurm executor plugin and profiles/slurm, against the same matrix run locally: same
files, both cells done, same summary rows. Real llama-server, real SmolLM2 GGUF, real ShareGPT
prompts.

The local run says its engine needs a GPU and runs with `--cores 2 --resources gpu=1`: the two
cells must not overlap. (The Slurm node has no GPU, so there the engine asks for none; resources
never change a result, so the outputs still match.)

The cluster has no accounting (no slurmdbd), so job states come from `squeue` and no account is
given; slurm.conf keeps finished jobs visible for MinJobAge (300 s) so squeue sees them end.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.pipeline import (
    REPO,
    planned_cells,
    run_snakemake,
    snakemake_argv,
    tiny_config,
    write_config,
)
from tests.support.slurm_cluster import PARTITION, missing_binaries, single_node_slurm

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

BASE = "smollm2-135m__llamacpp-cpu__q4_1__none__tiny"
NGRAM = "smollm2-135m__llamacpp-cpu__q4_1__ngram__tiny"
CELL_MEM_MB = 1500
CELL_RUNTIME_MIN = 10
IDENTITY = (
    "cell",
    "model",
    "engine",
    "quant",
    "drafter",
    "concurrency",
    "status",
    "completed",
    "errors",
)


def tiny_matrix(gpu: int = 0) -> dict:
    """The e2e test's two cells, with what each asks of the cluster: matrix-wide partition and
    wall time, engine-level CPUs, memory and GPUs."""
    config = tiny_config(
        [
            {
                "matrix": {
                    "model": ["smollm2-135m"],
                    "engine": ["llamacpp-cpu"],
                    "drafter": ["none", "ngram"],
                    "workload": ["tiny"],
                }
            }
        ]
    )
    config["resources"] = {"slurm_partition": PARTITION, "runtime": CELL_RUNTIME_MIN}
    config["engines"]["llamacpp-cpu"]["resources"] = {
        "cpus_per_task": 1,
        "mem_mb": CELL_MEM_MB,
        "gpu": gpu,
    }
    return config


def skip_without_slurm() -> None:
    missing = missing_binaries()
    if missing:
        pytest.skip(
            f"Slurm/munge not installed (no {', '.join(missing)}); .ci/run installs "
            "Debian's slurm-wlm and munge"
        )


def result_files(workdir: Path) -> set[str]:
    return {str(p.relative_to(workdir)) for p in (workdir / "results").rglob("*") if p.is_file()}


def summary_rows(workdir: Path) -> dict[str, dict[str, str]]:
    with open(workdir / "results/summary/summary.csv") as handle:
        return {row["cell"]: row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    skip_without_slurm()
    with single_node_slurm(tmp_path_factory.mktemp("slurm")) as running:
        yield running


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("local")
    write_config(workdir, tiny_matrix(gpu=1))
    proc = run_snakemake(workdir, "--cores", "2", "--resources", "gpu=1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return workdir


@pytest.fixture(scope="module")
def slurm_run(cluster, tmp_path_factory):
    """The one command a cluster user runs, plus the settings of a cluster without accounting
    and a short first status check (the default waits 40 s)."""
    workdir = tmp_path_factory.mktemp("cluster")
    write_config(workdir, tiny_matrix())
    argv = snakemake_argv(
        workdir,
        "--workflow-profile",
        str(REPO / "profiles/slurm"),
        "--slurm-status-command",
        "squeue",
        "--slurm-init-seconds-before-status-checks",
        "3",
        "--jobs",
        "2",
        "--latency-wait",
        "10",
    )
    start = time.monotonic()
    proc = subprocess.run(argv, env=cluster.env, capture_output=True, text=True, timeout=420)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:] + "\n" + cluster.logs()
    print(f"slurm run: {elapsed:.0f} s")
    return workdir


def test_cluster_starts_and_stops_cleanly(tmp_path):
    """The helper's start and teardown on a cluster of its own: a job runs, and no daemon
    outlives the block."""
    skip_without_slurm()
    with single_node_slurm(tmp_path) as running:
        job_id = running.run(
            "sbatch", "--parsable", f"--output={tmp_path}/job.out", "--wrap", "srun true"
        ).strip()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and running.job(job_id).get("JobState") != "COMPLETED":
            time.sleep(0.5)
        assert running.job(job_id).get("JobState") == "COMPLETED", running.logs()
        pids = [proc.pid for proc in running.daemons.values()]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_cells_run_as_slurm_jobs_with_their_resources(cluster, slurm_run):
    """Only the cells went to Slurm (weights, engine, cards, tables, report stay local), each
    with the partition, memory, wall time and CPUs its config asks for."""
    jobs = cluster.jobs()
    assert sorted(job["Comment"] for job in jobs) == sorted(
        f"rule_cell_wildcards_{cell}" for cell in (BASE, NGRAM)
    )
    for job in jobs:
        assert job["JobState"] == "COMPLETED", job
        assert job["ExitCode"] == "0:0", job
        assert job["Partition"] == PARTITION
        assert job["MinMemoryNode"] == f"{CELL_MEM_MB}M"
        assert job["TimeLimit"] == f"00:{CELL_RUNTIME_MIN:02d}:00"
        assert job["CPUs/Task"] == "1"
        assert job["Account"] == "(null)"


def test_outputs_match_a_local_run(local_run, slurm_run):
    workdir = slurm_run
    assert result_files(workdir) == result_files(local_run)
    local_rows, slurm_rows = summary_rows(local_run), summary_rows(workdir)
    assert set(slurm_rows) == {BASE, NGRAM}
    for cell, row in slurm_rows.items():
        assert row["status"] == "done", row
        assert float(row["decode_tok_s"]) > 0
        assert {k: row[k] for k in IDENTITY} == {k: local_rows[cell][k] for k in IDENTITY}
        metrics = json.loads((workdir / "results/cells" / cell / "metrics.json").read_text())
        assert metrics["completed"] == 4
        assert metrics["server_command"][0].endswith("llama-server")
    assert (workdir / "results/report.html").stat().st_size > 0


def test_editing_resources_reruns_nothing(slurm_run):
    """Resources say where a cell runs, not what it measures."""
    workdir = slurm_run
    config = tiny_matrix()
    config["resources"]["runtime"] = 90
    config["engines"]["llamacpp-cpu"]["resources"] = {"cpus_per_task": 4, "mem_mb": 4000}
    config["cells"][0]["resources"] = {"slurm_extra": "--qos=high"}
    write_config(workdir, config)
    try:
        assert planned_cells(workdir) == set()
    finally:
        write_config(workdir, tiny_matrix())


def test_local_gpu_resource_keeps_cells_apart(local_run):
    """Two cells that each need the one GPU ran one after the other, though 2 cores were free."""
    spans = sorted(
        (metrics["started_at"], metrics["finished_at"])
        for metrics in (
            json.loads((local_run / "results/cells" / cell / "metrics.json").read_text())
            for cell in (BASE, NGRAM)
        )
    )
    assert spans[0][1] <= spans[1][0], spans
