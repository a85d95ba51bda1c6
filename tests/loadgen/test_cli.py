"""The standalone command, run as a user would (`python -m workflow_scripts.loadgen`), against a
stand-in server that records what it was sent: the files, their contract names (docs/outputs.md),
the model taken from /v1/models, the API key sent as a header and written nowhere."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from tests.support.engines import REPO
from workflow_scripts.loadgen.sources.jsonl import load_jsonl

pytestmark = pytest.mark.standin

SECRET = "sk-standin-0123456789abcdef"
LATENCY_KEYS = {"mean", "median", "p90", "p99"}


@pytest.fixture
def recording_server(standin):
    """Stand-in: lists one model, streams 4 tokens per request, records each request."""
    seen: list[dict] = []

    async def handler(reader, writer):
        while True:
            method, path, headers, body = await standin.read_request(reader)
            if method == "GET" and path == "/v1/models":
                payload = json.dumps({"data": [{"id": "served-model"}, {"id": "other"}]}).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
                )
            else:
                seen.append({"path": path, "headers": headers, "body": json.loads(body)})
                writer.write(standin.sse_head() + standin.whole_stream(["w"] * 4, prompt_tokens=9))
            await writer.drain()

    return standin.start(handler), seen


def run_cli(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}  # this tree's code
    return subprocess.run(
        [sys.executable, "-m", "workflow_scripts.loadgen", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_cli_writes_metrics_and_requests(recording_server, tmp_path):
    url, seen = recording_server
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(8)))
    out = tmp_path / "run"
    proc = run_cli(
        "--base-url",
        url,
        "--dataset",
        "jsonl",
        "--dataset-path",
        str(prompts),
        "--num-prompts",
        "6",
        "--shuffle-seed",
        "3",
        "--concurrency",
        "2",
        "--max-seconds",
        "60",
        "--max-tokens",
        "4",
        "--ignore-eos",
        "--temperature",
        "0.5",
        "--api-key-env",
        "STANDIN_KEY",
        "--slo-ttft-ms",
        "10000",
        "--out",
        str(out),
        env_extra={"STANDIN_KEY": SECRET},
    )
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]

    assert metrics["status"] == "done"
    assert (metrics["completed"], metrics["errors"], metrics["incomplete"]) == (6, 0, 0)
    assert (metrics["prompt_tokens"], metrics["completion_tokens"]) == (6 * 9, 6 * 4)
    assert metrics["errors_by_reason"] == {} and metrics["hit_time_cap"] is False
    for key in ("prefill_tok_s", "decode_tok_s", "req_per_s", "duration_s"):
        assert metrics[key] > 0
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        assert set(metrics[key]) >= LATENCY_KEYS
    assert metrics["goodput"]["good_requests"] == 6
    assert metrics["model"] == "served-model"
    assert metrics["dataset_sha256"] == hashlib.sha256(prompts.read_bytes()).hexdigest()
    shuffled = [p.index for p in load_jsonl(prompts, 6, shuffle_seed=3).prompts]
    assert metrics["prompt_indices"] == shuffled and shuffled != list(range(6))
    assert metrics["load"]["api_key_set"] is True

    assert len(lines) == 6 + 1  # one warmup line
    measured = [x for x in lines if not x["warmup"]]
    assert [x["prompt_index"] for x in measured] == metrics["prompt_indices"]
    for x in measured:
        assert {
            "index",
            "prompt_tokens",
            "completion_tokens",
            "ttft_s",
            "chunk_times_s",
            "e2e_s",
            "error",
        } <= set(x)
        assert len(x["chunk_times_s"]) == 4

    texts = [f"question {i}" for i in metrics["prompt_indices"]]
    sent = seen  # the warmup request, then the six measured ones
    assert all(r["path"] == "/v1/chat/completions" for r in sent)
    assert all(r["headers"]["authorization"] == f"Bearer {SECRET}" for r in sent)
    bodies = [r["body"] for r in sent]
    assert all(b["model"] == "served-model" and b["stream"] is True for b in bodies)
    assert all(b["stream_options"] == {"include_usage": True} for b in bodies)
    assert all(b["ignore_eos"] is True and b["temperature"] == 0.5 for b in bodies)
    assert all(b["max_tokens"] == 4 for b in bodies)
    assert sorted(b["messages"][0]["content"] for b in bodies[1:]) == sorted(texts)

    for path in out.rglob("*"):  # the key is never written
        assert SECRET not in path.read_text()
    assert SECRET not in proc.stderr + proc.stdout


def test_cli_completions_endpoint_and_explicit_model(recording_server, tmp_path):
    url, seen = recording_server
    out = tmp_path / "run"
    proc = run_cli(
        "--base-url",
        url + "/v1",
        "--dataset",
        "random",
        "--input-len",
        "5",
        "--num-prompts",
        "3",
        "--concurrency",
        "3",
        "--max-tokens",
        "4",
        "--endpoint",
        "completions",
        "--model",
        "mine",
        "--warmup-requests",
        "0",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert {r["path"] for r in seen} == {"/v1/completions"}
    assert all(r["body"]["model"] == "mine" and "prompt" in r["body"] for r in seen)
    assert "authorization" not in seen[0]["headers"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["completed"] == 3 and metrics["load"]["api_key_set"] is False


def test_cli_fails_loudly_when_nothing_completes(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "run"
    proc = run_cli(
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--dataset",
        "random",
        "--num-prompts",
        "2",
        "--concurrency",
        "1",
        "--max-tokens",
        "4",
        "--model",
        "m",
        "--out",
        str(out),
    )
    assert proc.returncode == 1
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["errors_by_reason"] == {"connection": 2}


def test_cli_extra_body_reaches_every_request_and_spec_fields_are_kept(standin, tmp_path):
    """`--extra-body` (what the plan prints for an SGLang drafter cell) goes into every request;
    a stand-in answering as SGLang does when asked (`sglext.spec_tokens_details` beside the
    usage) has those fields kept per request in requests.jsonl."""
    seen: list[dict] = []
    details = {"spec_verify_ct": 2, "spec_num_correct_drafts": 2, "spec_accept_length": 2.0}

    async def handler(reader, writer):
        while True:
            _, _, _, body = await standin.read_request(reader)
            seen.append(json.loads(body))
            final = {**standin.usage(5, 4), "sglext": {"spec_tokens_details": details}}
            writer.write(
                standin.sse_head()
                + b"".join(standin.event(standin.content(t)) for t in ("a", "b", "c", "d"))
                + standin.event(final)
                + standin.event(b"[DONE]")
                + standin.chunk(b"")
            )
            await writer.drain()

    out = tmp_path / "run"
    proc = run_cli(
        "--base-url",
        standin.start(handler),
        "--dataset",
        "random",
        "--num-prompts",
        "3",
        "--concurrency",
        "1",
        "--max-tokens",
        "4",
        "--model",
        "m",
        "--extra-body",
        '{"return_spec_tokens_details":true}',
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert len(seen) == 4 and all(b["return_spec_tokens_details"] is True for b in seen)
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert all(x["spec_details"] == details for x in lines)
    assert json.loads((out / "metrics.json").read_text())["load"]["extra_body"] == {
        "return_spec_tokens_details": True
    }
    bad = run_cli(
        "--base-url",
        "http://127.0.0.1:9",
        "--num-prompts",
        "1",
        "--concurrency",
        "1",
        "--max-tokens",
        "4",
        "--extra-body",
        "[1]",
        "--out",
        str(tmp_path / "x"),
    )
    assert bad.returncode == 2 and "expected a JSON object" in bad.stderr
