"""Security of what the pipeline launches, against a REAL llama-server (SmolLM2-135M): it listens
on 127.0.0.1 unless the config says otherwise (seen in its sockets, not only its argv), and an API
key named in the config reaches the server through its environment only, is sent by the client,
and requests without it are refused. The secret never enters an argv, a repr or a result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import requests

from tests.fixtures.faults.pipeline import files_holding
from tests.support.engines import (
    left_behind,
    llama_server_binary,
    make_config,
    one_cell,
    smollm2_gguf,
)
from workflow_scripts.cell.run import CellInputs, load_settings_for, run_cell
from workflow_scripts.engines import adapter_for
from workflow_scripts.engines.command import cell_server_command, cell_weights
from workflow_scripts.loadgen.client import RunOptions, run_load
from workflow_scripts.loadgen.command import client_argv
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.process.auth import server_api_key
from workflow_scripts.process.ports import reserve_port
from workflow_scripts.process.server import ServerProcess, running, wait_ready

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-bench-Zq8rT2vX9wLm4Kp7"
KEY_ENV = "BENCH_SECURITY_TEST_KEY"
PROBE = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
PROMPTS = [Prompt(i, f"Say the number {i}.") for i in range(3)]


@pytest.fixture(scope="module")
def binary() -> str:
    return llama_server_binary()


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> str:
    """The cached GGUF through a link of its own: this module's servers are told apart by it."""
    folder = tmp_path_factory.mktemp("security-weights")
    link = folder / "smollm2-security.gguf"
    link.symlink_to(smollm2_gguf(folder))
    return str(link)


def llama_cell(binary: str, workload: dict | None = None, engine: dict | None = None, **top):
    engine = {
        "kind": "llamacpp",
        "launch": "native",
        "binary": binary,
        "settings": {"ctx_size": 1024, "threads": 1},
        **(engine or {}),
    }
    return one_cell(
        make_config(
            {"llama": engine},
            [{"model": "m", "quant": "q", "engine": "llama", "workload": "w"}],
            workload={"warmup_requests": 0, "max_tokens": 4, **(workload or {})},
            memory={"interval_s": 0.2, "baseline_samples": 1},
            **top,
        )
    )


def command_for(cell, gguf: str, port: int):
    weights, _ = cell_weights(cell, {"primary": gguf}, None)
    return cell_server_command(cell, adapter_for("llamacpp"), {}, weights, None, port)


def listening_hosts(pid: int) -> set[str]:
    return {
        c.laddr.ip
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }


@pytest.mark.parametrize(
    "host,expected",
    [(None, {"127.0.0.1"}), ("127.0.0.2", {"127.0.0.2"})],
    ids=["default", "configured"],
)
def test_the_server_listens_where_the_config_says_and_loopback_by_default(
    binary, gguf, tmp_path, host, expected
):
    """The configured address is another loopback one, so the test exposes nothing."""
    cell = llama_cell(binary, **({"host": host} if host else {}))
    with reserve_port(cell.run.host) as lease:
        command = command_for(cell, gguf, lease.port)
        server = ServerProcess.for_command(command, tmp_path / "server.log")
        with running(server):
            wait_ready(server, command.base_url, "/health", 60, PROBE)
            assert listening_hosts(server.pid) == expected
    assert left_behind(gguf) == []


def test_an_api_key_from_the_environment_is_required_by_the_server_and_sent_by_the_client(
    binary, gguf, tmp_path, monkeypatch
):
    monkeypatch.setenv(KEY_ENV, KEY)
    cell = llama_cell(binary, engine={"api_key_env": KEY_ENV})
    assert KEY not in json.dumps(cell.to_dict())  # what Snakemake's params are made of
    with reserve_port() as lease:
        command = command_for(cell, gguf, lease.port)
        assert command.env == {"LLAMA_API_KEY": KEY}  # the server's own variable
        assert KEY not in " ".join(command.argv) and KEY not in repr(command)
        server = ServerProcess.for_command(command, tmp_path / "server.log")
        assert KEY not in repr(server)
        url = command.base_url + "/v1/chat/completions"
        with running(server), server_api_key(KEY):
            wait_ready(server, command.base_url, "/health", 60, PROBE)
            assert requests.get(command.base_url + "/health", timeout=10).status_code == 200
            assert requests.post(url, json=PROBE, timeout=30).status_code == 401
            wrong = {"Authorization": "Bearer not-the-key"}
            assert requests.post(url, json=PROBE, headers=wrong, timeout=30).status_code == 401
            right = {"Authorization": f"Bearer {KEY}"}
            assert requests.post(url, json=PROBE, headers=right, timeout=30).status_code == 200

            spec = load_settings_for(cell, command.base_url, None)  # the key the cell would send
            assert spec.api_key == KEY and KEY not in repr(spec)
            assert KEY not in json.dumps(spec.public()) and spec.public()["api_key_set"]
            sent = compute_metrics(
                run_load(spec, PROMPTS, RunOptions(progress=False)).records, False
            )
            assert sent["completed"] == 3 and sent["errors"] == 0
            unkeyed = load_settings_for(
                llama_cell(
                    binary,
                    workload={"api_key_env": "BENCH_UNSET_KEY"},
                    engine={"api_key_env": KEY_ENV},
                ),
                command.base_url,
                None,
            )
            assert unkeyed.api_key is None
            refused = compute_metrics(
                run_load(unkeyed, PROMPTS, RunOptions(progress=False)).records, False
            )
            assert refused["completed"] == 0 and refused["errors_by_reason"] == {"http_401": 3}

            # The standalone client's command line a card prints names the variable, not the key.
            argv = client_argv(cell.workload_spec, command.base_url, str(tmp_path / "cli"))
            assert argv[argv.index("--api-key-env") + 1] == KEY_ENV and KEY not in argv
            cli = subprocess.run(
                [sys.executable, *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=120
            )
            assert cli.returncode == 0, cli.stderr[-2000:]
            written = json.loads((tmp_path / "cli/metrics.json").read_text())
            assert written["completed"] == 4 and written["errors"] == 0
    assert KEY.encode() not in (tmp_path / "server.log").read_bytes()
    assert files_holding(tmp_path, KEY.encode()) == []
    assert left_behind(gguf) == []


def test_a_cell_whose_key_variable_is_unset_fails_before_launch(binary, tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    cell = llama_cell(binary, engine={"api_key_env": KEY_ENV})
    result = run_cell(
        CellInputs(
            cell=cell,
            out_dir=tmp_path / "cell",
            engine_info={},
            weights_manifest={"primary": "/nonexistent.gguf"},
        )
    )
    assert result["status"] == "failed"
    assert (
        f"'engines.llama.api_key_env': environment variable {KEY_ENV} is not set"
        in result["reason"]
    )
    assert (tmp_path / "cell/server.log").read_text() == "(the server was never started)\n"


def test_docker_passes_the_key_by_name_only(monkeypatch):
    """A container gets `-e LLAMA_API_KEY` (docker copies the value from its own environment,
    which the launch sets); the value is in no argv."""
    monkeypatch.setenv(KEY_ENV, KEY)
    engine = {
        "kind": "llamacpp",
        "launch": "docker",
        "api_key_env": KEY_ENV,
        "docker": {"image": "ghcr.io/ggml-org/llama.cpp:server", "gpus": ""},
    }
    cell = one_cell(
        make_config({"d": engine}, [{"model": "m", "quant": "q", "engine": "d", "workload": "w"}])
    )
    command = command_for(cell, "/models/m.gguf", 8080)
    argv = command.argv
    assert argv[argv.index("-e") + 1] == "LLAMA_API_KEY"
    assert command.env == {"LLAMA_API_KEY": KEY}
    assert KEY not in " ".join(argv)
    assert "127.0.0.1:8080:8080" in argv  # published on loopback only
