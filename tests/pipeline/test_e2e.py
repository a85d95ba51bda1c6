"""The real pipeline end to end on a tiny matrix: real llama-server (the cached pinned build),
real GGUF (SmolLM2-135M from its registry package), real ShareGPT prompts. No stand-ins."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time

import pytest
import yaml

from tests.support.pipeline import (
    alive,
    llama_servers_under,
    planned_cells,
    run_snakemake,
    snakemake_argv,
    tiny_config,
    tiny_workload,
    write_config,
)

pytestmark = pytest.mark.slow

BASE = "smollm2-135m__llamacpp-cpu__q4_1__none__tiny"
NGRAM = "smollm2-135m__llamacpp-cpu__q4_1__ngram__tiny"


def read_csv(path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One fresh run of a 2-cell matrix (base + ngram drafter)."""
    workdir = tmp_path_factory.mktemp("pipeline")
    write_config(
        workdir,
        tiny_config(
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
        ),
    )
    start = time.monotonic()
    proc = run_snakemake(workdir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return workdir, time.monotonic() - start


def test_fresh_run_writes_every_output(finished_run):
    workdir, _ = finished_run
    rows = read_csv(workdir / "results/summary/summary.csv")
    assert {r["cell"] for r in rows} == {BASE, NGRAM}
    for row in rows:
        assert row["status"] == "done", row
        assert float(row["decode_tok_s"]) > 0
        assert int(row["completed"]) > 0
    for cell in (BASE, NGRAM):
        folder = workdir / "results/cells" / cell
        for name in ("metrics.json", "requests.jsonl", "memory.csv", "server.log"):
            assert (folder / name).stat().st_size > 0, name
        metrics = json.loads((folder / "metrics.json").read_text())
        assert metrics["completed"] + metrics["errors"] + metrics["incomplete"] == 4
        assert metrics["server_command"][0].endswith("llama-server")
        assert "127.0.0.1" in metrics["server_command"]
        lines = (folder / "requests.jsonl").read_text().splitlines()
        measured = [json.loads(line) for line in lines if not json.loads(line)["warmup"]]
        assert (
            sum(r["completion_tokens"] for r in measured if r["status"] == "ok")
            == metrics["completion_tokens"]
        )
    png = workdir / "results/summary/decode_tok_s.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    spec = json.loads((workdir / "results/cells" / NGRAM / "metrics.json").read_text())["spec"]
    assert spec["source"] == "metrics"
    assert spec["drafts"] is not None


def test_second_run_has_nothing_to_do(finished_run):
    workdir, _ = finished_run
    start = time.monotonic()
    proc = run_snakemake(workdir)
    assert proc.returncode == 0
    assert "Nothing to be done" in proc.stdout + proc.stderr
    assert time.monotonic() - start < 30


def test_memory_series_spans_launch_to_teardown(finished_run):
    workdir, _ = finished_run
    rows = read_csv(workdir / "results/cells" / BASE / "memory.csv")
    phases = [r["phase"] for r in rows]
    assert phases[0] == "baseline" and phases[-1] == "teardown"
    assert {"load", "warmup", "bench"} <= set(phases)
    times = [float(r["t"]) for r in rows]
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) < 0.2 * 2


def test_edit_one_cell_reruns_only_that_cell(finished_run, tmp_path):
    """Dry runs after config edits: params carry each cell's own settings only."""
    workdir, _ = finished_run
    config = yaml.safe_load((workdir / "matrix.yaml").read_text())
    try:
        edited = json.loads(json.dumps(config))
        edited["drafters"]["ngram"]["n_max"] = 16
        write_config(workdir, edited)
        assert planned_cells(workdir) == {NGRAM}

        added = json.loads(json.dumps(config))
        added["workloads"]["tiny8"] = tiny_workload(max_tokens=8)
        added["cells"].append(
            {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny8"}
        )
        write_config(workdir, added)
        assert planned_cells(workdir) == {"smollm2-135m__llamacpp-cpu__q4_1__none__tiny8"}
    finally:
        write_config(workdir, config)
    assert planned_cells(workdir) == set()


def test_failed_cell_is_shown_and_retried_alone(tmp_path):
    """A cell whose weights are not a GGUF fails with its reason, does not stop the good cell,
    and is the only one planned again on the next run."""
    bad_file = tmp_path / "broken.gguf"
    bad_file.write_bytes(os.urandom(4096))
    broken = {"quants": {"q0": {"weights": {"source": "local", "path": str(bad_file)}}}}
    write_config(
        tmp_path,
        tiny_config(
            [
                {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"},
                {"model": "broken", "engine": "llamacpp-cpu", "workload": "tiny"},
            ],
            models={"broken": broken},
        ),
    )
    proc = run_snakemake(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["cell"]: r for r in read_csv(tmp_path / "results/summary/summary.csv")}
    assert rows[BASE]["status"] == "done"
    failed = rows["broken__llamacpp-cpu__q0__none__tiny"]
    assert failed["status"] == "failed"
    assert "not a GGUF" in failed["reason"]
    assert planned_cells(tmp_path) == {"broken__llamacpp-cpu__q0__none__tiny"}


def test_ctrl_c_tears_the_server_down_and_redoes_only_that_cell(tmp_path):
    write_config(
        tmp_path,
        tiny_config(
            [{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "long"}],
            workloads={"long": tiny_workload(num_prompts=64, max_tokens=256, max_seconds=300)},
        ),
    )
    proc = subprocess.Popen(
        snakemake_argv(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    servers = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not servers:
            servers = llama_servers_under(proc.pid)
            time.sleep(0.2)
        assert servers, "the cell never started llama-server"
        time.sleep(3)  # under load now
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while alive(servers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(servers), "llama-server survived Ctrl-C"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for server in alive(servers):
            server.kill()
    cell = "smollm2-135m__llamacpp-cpu__q4_1__none__long"
    assert not (tmp_path / "results/cells" / cell / "metrics.json").exists()
    assert planned_cells(tmp_path) == {cell}
