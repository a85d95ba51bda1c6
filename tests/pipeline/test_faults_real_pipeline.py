"""Faults of a REAL llama-server (the cached pinned build, SmolLM2-135M) inside the REAL pipeline,
no stand-ins: the server killed while a cell is under load, a GGUF cut short, and SIGTERM to
`snakemake` itself while a cell is under load. In each, the other cells are unharmed, nothing of
the hit cell counts as a result, no process is left, and the next run redoes exactly the hit
cells."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.support.engines import smollm2_gguf
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

GOOD = "smollm2-135m__llamacpp-cpu__q4_1__none__tiny"
VICTIM = "smollm2-135m__llamacpp-cpu__q4_1__none__long"
CUT = "cut__llamacpp-cpu__q0__none__tiny"
# The victim's workload alone runs 3 slots: its llama-server is the one with `--parallel 3`.
LONG = tiny_workload(num_prompts=48, concurrency=3, max_tokens=256, max_seconds=300)
OUTPUTS = ("metrics.json", "requests.jsonl", "memory.csv", "server.log")


def metrics(workdir: Path, cell_id: str) -> dict:
    return json.loads((workdir / "results/cells" / cell_id / "metrics.json").read_text())


def victim_server(snakemake: subprocess.Popen, deadline_s: float = 180) -> psutil.Process:
    """The victim's llama-server, found among snakemake's descendants."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and snakemake.poll() is None:
        for server in llama_servers_under(snakemake.pid):
            try:
                if "--parallel 3" in " ".join(server.cmdline()):
                    return server
            except psutil.Error:
                continue
        time.sleep(0.1)
    raise AssertionError("the victim cell never started llama-server")


def wait_under_load(workdir: Path, server: psutil.Process, timeout_s: float = 120) -> None:
    """Until the victim's server works on measured requests (task 0 is the readiness probe,
    the next one the warmup)."""
    log = workdir / "results/cells" / VICTIM / "server.log"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and server.is_running():
        if log.exists() and log.read_text(errors="replace").count("processing task") >= 4:
            return
        time.sleep(0.05)
    raise AssertionError("the victim's server never got under load")


def listening(server: psutil.Process) -> list[tuple[str, int]]:
    return [
        c.laddr[:2] for c in server.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
    ]


def stop_all(snakemake: subprocess.Popen, servers: list[psutil.Process]) -> None:
    if snakemake.poll() is None:
        os.killpg(snakemake.pid, signal.SIGKILL)
        snakemake.wait(timeout=30)
    for server in alive(servers):
        server.kill()


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """A good cell, a cell whose llama-server the test SIGKILLs once it is under load (as the
    OOM killer would), and a cell whose GGUF is cut short after 2 MiB."""
    workdir = tmp_path_factory.mktemp("faults-killed")
    whole = Path(smollm2_gguf(workdir))
    cut = workdir / "cut.gguf"
    with open(whole, "rb") as source:
        cut.write_bytes(source.read(2 << 20))  # the header is whole: only the server can tell
    write_config(
        workdir,
        tiny_config(
            [
                {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"},
                {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "long"},
                {"model": "cut", "engine": "llamacpp-cpu", "workload": "tiny"},
            ],
            workloads={"tiny": tiny_workload(), "long": LONG},
            models={"cut": {"quants": {"q0": {"weights": {"source": "local", "path": str(cut)}}}}},
        ),
    )
    snakemake = subprocess.Popen(
        snakemake_argv(workdir, "results/summary/summary.csv"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(snakemake.stdout), daemon=True)
    reader.start()
    servers = []
    try:
        server = victim_server(snakemake)
        servers.append(server)
        wait_under_load(workdir, server)
        sockets = listening(server)
        server.send_signal(signal.SIGKILL)
        assert snakemake.wait(timeout=300) == 0, "".join(output)[-3000:]
    finally:
        stop_all(snakemake, servers)
    reader.join(10)
    return workdir, sockets, servers


def test_a_server_killed_under_load_fails_only_its_cell(killed_run):
    workdir, _, servers = killed_run
    victim = metrics(workdir, VICTIM)
    assert victim["status"] == "failed"
    assert "server was killed by SIGKILL (often the out-of-memory killer" in victim["reason"]
    assert victim["completed"] < 48  # what it finished is kept as a record, never as a result
    good = metrics(workdir, GOOD)
    assert good["status"] == "done" and good["completed"] == 4
    assert not alive(servers)


def test_a_gguf_cut_short_fails_its_cell_with_the_servers_words(killed_run):
    workdir, _, _ = killed_run
    cut = metrics(workdir, CUT)
    assert cut["status"] == "failed"
    assert "before it was ready" in cut["reason"]
    assert "failed to load model" in cut["reason"]  # llama-server's own line, from its log
    assert "ready_s" not in cut


def test_the_pipelines_server_listens_on_loopback_only(killed_run):
    """The default config names no host: the server must listen on 127.0.0.1 and nowhere else
    (its sockets, not its argv)."""
    _, sockets, _ = killed_run
    assert sockets, "no listening socket seen"
    assert {host for host, _ in sockets} == {"127.0.0.1"}


def test_the_failed_cells_and_only_they_are_redone(killed_run):
    workdir, _, _ = killed_run
    assert planned_cells(workdir) == {VICTIM, CUT}
    summary = (workdir / "results/summary/summary.csv").read_text()
    assert summary.count("failed") >= 2 and "killed by SIGKILL" in summary


@pytest.mark.parametrize("to_group", [False, True], ids=["snakemake-only", "process-group"])
def test_sigterm_to_snakemake_under_load_tears_down_and_redoes_only_that_cell(tmp_path, to_group):
    """SIGTERM to the snakemake process alone (`kill PID`, systemd, `timeout`), or to its whole
    process group (a batch system): Snakemake by itself would wait for the running cell to end.
    The server's process group must be gone within 10 s, nothing of the cell kept, and the next
    run must redo that cell and not the finished one."""
    write_config(
        tmp_path,
        tiny_config(
            [
                {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"},
                {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "long"},
            ],
            workloads={"tiny": tiny_workload(), "long": LONG},
        ),
    )
    first = run_snakemake(tmp_path, f"results/cells/{GOOD}/metrics.json")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    snakemake = subprocess.Popen(
        snakemake_argv(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    servers = []
    try:
        server = victim_server(snakemake)
        servers.append(server)
        group = os.getpgid(server.pid)
        wait_under_load(tmp_path, server)
        sent = time.monotonic()
        if to_group:
            os.killpg(snakemake.pid, signal.SIGTERM)
        else:
            snakemake.send_signal(signal.SIGTERM)
        while time.monotonic() - sent < 10 and group_alive(group):
            time.sleep(0.05)
        assert not group_alive(group), "the server's process group outlived SIGTERM by 10 s"
        assert snakemake.wait(timeout=60) != 0
    finally:
        stop_all(snakemake, servers)
    folder = tmp_path / "results/cells" / VICTIM
    assert [name for name in OUTPUTS if (folder / name).exists()] == []
    assert "signal 15" in (tmp_path / "logs/cells" / f"{VICTIM}.log").read_text()
    assert planned_cells(tmp_path) == {VICTIM}


def group_alive(pgid: int) -> bool:
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False
