"""Against a real llama-server (SmolLM2-135M, CPU, `--metrics`): the client's token counts agree
exactly with the server's own counters, keep-alive gives no errors, and the standalone command
works on ShareGPT prompts as the README shows it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support.engines import llama_server_binary
from tests.support.models import SMOLLM2_WEIGHTS
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.datasets import load_dataset
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.process.ports import free_port
from workflow_scripts.weights.fetch import fetch_weights

pytestmark = pytest.mark.slow

COUNTERS = ("tokens_predicted_total", "prompt_tokens_total", "prompt_tokens_cached_total")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """A real llama-server with 4 slots; always torn down."""
    workdir = tmp_path_factory.mktemp("llama")
    binary = llama_server_binary()
    model = fetch_weights(SMOLLM2_WEIGHTS, workdir / "weights.json")["primary"]
    port = free_port()
    argv = [
        binary,
        "-m",
        model,
        "-c",
        "8192",
        "--parallel",
        "4",
        "-t",
        "1",
        "--metrics",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (workdir / "server.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "llama-server not ready in 120 s"
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    found = {}
    for name in COUNTERS:
        match = re.search(rf"^llamacpp:{name} ([0-9.e+]+)$", text, re.MULTILINE)
        assert match, f"llamacpp:{name} missing from /metrics"
        found[name] = float(match.group(1))
    return found


@pytest.mark.parametrize("concurrency", [1, 4, 8])
def test_token_counts_agree_with_the_server(llama_server, concurrency):
    """Warmup included on both sides: every request the client sent is in the server's
    counters. Concurrency 8 > 4 slots: requests queue in the server, still no errors."""
    prompts = load_dataset({"kind": "sharegpt"}, 8).prompts
    before = counters(llama_server)
    spec = LoadSettings(
        base_url=llama_server, concurrency=concurrency, max_tokens=16, warmup_requests=1
    )
    load = run_load(spec, prompts, RunOptions(progress=False))
    after = counters(llama_server)
    metrics = compute_metrics(load.records, hit_time_cap=load.hit_time_cap)
    assert metrics["errors"] == 0, metrics["errors_by_reason"]
    assert metrics["completed"] == len(prompts)
    assert metrics["token_count_source"] == "usage"
    delta = {k: after[k] - before[k] for k in COUNTERS}
    client_completion = sum(r.completion_tokens for r in load.records)
    client_prompt = sum(r.prompt_tokens for r in load.records)
    assert client_completion == delta["tokens_predicted_total"]
    assert client_prompt == delta["prompt_tokens_total"] + delta["prompt_tokens_cached_total"]
    # tokens were streamed one per chunk by llama-server: the chunk count agrees as well
    assert all(r.content_chunks <= r.completion_tokens for r in load.records)


def test_cli_on_sharegpt(llama_server, tmp_path):
    out = tmp_path / "run"
    before = counters(llama_server)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "workflow_scripts.loadgen",
            "--base-url",
            llama_server,
            "--dataset",
            "sharegpt",
            "--num-prompts",
            "6",
            "--concurrency",
            "3",
            "--max-seconds",
            "60",
            "--max-tokens",
            "12",
            "--warmup-requests",
            "0",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr
    after = counters(llama_server)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "done" and metrics["completed"] == 6 and metrics["errors"] == 0
    assert metrics["prompt_indices"] == list(range(6))
    assert len(metrics["dataset_sha256"]) == 64
    assert metrics["model"].endswith(".gguf")  # llama-server lists its model file
    assert (
        metrics["completion_tokens"]
        == after["tokens_predicted_total"] - before["tokens_predicted_total"]
    )
    assert metrics["decode_tok_s"] > 0 and metrics["ttft_ms"]["median"] > 0
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 6
