"""Server lifecycle against a REAL llama-server (SmolLM2-135M): ready, killed mid-run, never ready
(a bad model file), a hanging start (STAND-IN: a process that listens and never answers), and
teardown on SIGTERM and Ctrl-C; after each, no process is left behind (checked with psutil)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
import requests

from tests.support.engines import (
    NEVER_ANSWERS,
    left_behind,
    llama_server_binary,
    make_config,
    one_cell,
    smollm2_gguf,
)
from workflow_scripts.cell.run import CellInputs, run_cell
from workflow_scripts.process.ports import reserve_port
from workflow_scripts.process.server import ServerError, ServerProcess, running, wait_ready

PROBE = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}


@pytest.fixture(scope="module")
def binary() -> str:
    return llama_server_binary()


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> str:
    """The cached GGUF through a link of its own, so this module's servers are told apart from
    anyone else's by their command line."""
    folder = tmp_path_factory.mktemp("weights")
    link = folder / "smollm2-lifecycle.gguf"
    link.symlink_to(smollm2_gguf(folder))
    return str(link)


def llama_argv(binary: str, model: str, port: int, *extra: str) -> list[str]:
    return [
        binary,
        "-m",
        model,
        "-c",
        "512",
        "--parallel",
        "1",
        "-t",
        "1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]


def test_ready_then_torn_down(binary, gguf, tmp_path):
    with reserve_port() as lease:
        server = ServerProcess(llama_argv(binary, gguf, lease.port), tmp_path / "server.log")
        marker = gguf
        with running(server):
            ready_s = wait_ready(server, f"http://127.0.0.1:{lease.port}", "/health", 60, PROBE)
            assert ready_s > 0
            assert server.alive()
            assert left_behind(marker, settle_s=0)  # it is there while running
        assert not server.alive()
        assert left_behind(marker) == []


def test_killed_mid_run_is_noticed_and_leaves_nothing(binary, gguf, tmp_path):
    with reserve_port() as lease:
        url = f"http://127.0.0.1:{lease.port}"
        server = ServerProcess(llama_argv(binary, gguf, lease.port), tmp_path / "server.log")
        with running(server):
            wait_ready(server, url, "/health", 60, PROBE)
            outcome = {}

            def stream():
                body = {
                    "messages": [{"role": "user", "content": "Count to a million."}],
                    "max_tokens": 4000,
                    "ignore_eos": True,
                    "stream": True,
                }
                try:
                    with requests.post(
                        url + "/v1/chat/completions", json=body, stream=True, timeout=60
                    ) as resp:
                        for _ in resp.iter_lines():
                            outcome.setdefault("first_chunk", True)
                    outcome["ended"] = "cleanly"
                except requests.RequestException as exc:
                    outcome["ended"] = type(exc).__name__

            reader = threading.Thread(target=stream)
            reader.start()
            while "first_chunk" not in outcome and reader.is_alive():
                time.sleep(0.01)
            os.kill(server.pid, signal.SIGKILL)
            reader.join(30)
            assert outcome.get("first_chunk") and outcome.get("ended") != "cleanly"
            server.proc.wait(timeout=10)  # the kill lands asynchronously
            assert not server.alive()
            with pytest.raises(ServerError, match="was killed by SIGKILL"):
                wait_ready(server, url, "/health", 60, PROBE)
        assert left_behind(gguf) == []


def test_bad_model_file_fails_fast_with_the_log(binary, tmp_path):
    bad = tmp_path / "random.gguf"
    bad.write_bytes(os.urandom(1 << 16))
    with reserve_port() as lease:
        server = ServerProcess(llama_argv(binary, str(bad), lease.port), tmp_path / "server.log")
        with running(server), pytest.raises(ServerError) as caught:
            wait_ready(server, f"http://127.0.0.1:{lease.port}", "/health", 300, PROBE)
        # it died before the (long) timeout: the message is the exit, with the server's own words
        message = str(caught.value)
        assert "exited with code" in message and "not ready after" not in message
        assert "random.gguf" in message or "model" in message.lower()
        assert left_behind(str(bad)) == []


def test_hanging_start_times_out_and_is_killed(tmp_path):
    """STAND-IN server: listens, accepts, never answers (what a silently hung engine looks like)."""
    script = tmp_path / "never_answers.py"
    script.write_text(NEVER_ANSWERS)
    with reserve_port() as lease:
        argv = [sys.executable, str(script), "--port", str(lease.port)]
        server = ServerProcess(argv, tmp_path / "server.log")
        with running(server), pytest.raises(ServerError) as caught:
            wait_ready(server, f"http://127.0.0.1:{lease.port}", "/health", 2, PROBE)
        assert "not ready after 2 s" in str(caught.value)
        assert "answering nothing" in str(caught.value)  # the log tail comes with it
        assert left_behind(str(script)) == []


DRIVER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from workflow_scripts.process.server import ServerProcess, running, sigterm_raises, wait_ready
    argv, port, log = sys.argv[1:-2], sys.argv[-2], Path(sys.argv[-1])
    with sigterm_raises():
        with running(ServerProcess(argv, log)) as server:
            wait_ready(server, f"http://127.0.0.1:{port}", "/health", 60)
            print("READY", server.pid, flush=True)
            time.sleep(120)
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_runner_tears_the_server_down(binary, gguf, tmp_path, signum):
    with reserve_port() as lease:
        argv = llama_argv(binary, gguf, lease.port)
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, *argv, str(lease.port), str(tmp_path / "s.log")],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        try:
            line = driver.stdout.readline()
            assert line.startswith("READY"), line
            server_pid = int(line.split()[1])
            driver.send_signal(signum)
            driver.wait(timeout=30)
            assert left_behind(gguf) == []
            with pytest.raises(ProcessLookupError):
                os.kill(server_pid, 0)
        finally:
            if driver.poll() is None:
                driver.kill()


def test_ports_held_by_a_cell_are_not_handed_out_twice():
    with reserve_port(preferred=None) as first, reserve_port(preferred=first.port) as second:
        assert second.port != first.port
    with reserve_port(preferred=first.port) as again:
        assert again.port == first.port  # free again once released


def test_run_cell_fails_when_the_server_dies_mid_load(binary, gguf, tmp_path):
    """run_cell with a real server killed once it is loaded: the cell is `failed`, its reason
    has the exit and the log tail, and nothing is left running."""
    config = make_config(
        {
            "llama": {
                "kind": "llamacpp",
                "launch": "native",
                "binary": binary,
                "settings": {"ctx_size": 1024, "threads": 1},
            }
        },
        [{"model": "m", "quant": "q", "engine": "llama", "workload": "w"}],
        workload={
            "num_prompts": 400,
            "concurrency": 2,
            "max_tokens": 64,
            "ignore_eos": True,
            "warmup_requests": 0,
        },
        memory={"interval_s": 0.2, "baseline_samples": 1},
    )
    cell = one_cell(config)
    out = tmp_path / "cell"
    killed = {}

    def kill_when_busy():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            log = out / "server.log"
            # task 0 is the readiness probe; more tasks mean the load is on
            if log.exists() and log.read_text(errors="replace").count("processing task") >= 3:
                for proc in psutil.Process().children(recursive=True):
                    if gguf in " ".join(proc.cmdline()):
                        proc.send_signal(signal.SIGKILL)  # ours: a child of this test
                        killed["pid"] = proc.pid
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    result = run_cell(
        CellInputs(
            cell=cell,
            out_dir=out,
            engine_info={"binary": binary},
            weights_manifest={"primary": gguf},
        )
    )
    killer.join()
    assert killed, "the server never got busy"
    assert result["status"] == "failed"
    assert "was killed by SIGKILL" in result["reason"] and "while the load ran" in result["reason"]
    assert result["context_guard"]["per_slot_context"] == 512
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["server_command"][0] == binary
    assert left_behind(gguf) == []
