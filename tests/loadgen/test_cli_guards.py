"""The standalone command refuses bad arguments with an argument error (not a traceback), sends
an API key only when the user names its variable, never leaves an earlier run's metrics.json to
be read as this one's, and caps a stalled warm-up at `--max-seconds`: run as a user would
(`python -m workflow_scripts.loadgen`) against stand-in servers on 127.0.0.1 that record what
they were sent."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.loadgen.test_cli import run_cli

pytestmark = pytest.mark.standin

SECRET = "sk-standin-guard-0123456789"


def base_args(url: str, out, *extra: str) -> list[str]:
    return [
        "--base-url", url, "--dataset", "random", "--input-len", "4", "--num-prompts", "2",
        "--concurrency", "1", "--max-tokens", "2", "--model", "m", "--out", str(out), *extra,
    ]  # fmt: skip


@pytest.fixture
def header_server(standin):
    """Stand-in: streams 2 tokens per request and records each request's headers."""
    seen: list[dict] = []

    async def handler(reader, writer):
        while True:
            _, _, headers, _ = await standin.read_request(reader)
            seen.append(headers)
            writer.write(standin.sse_head() + standin.whole_stream(["a", "b"]))
            await writer.drain()

    return standin.start(handler), seen


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--concurrency", "0", "at least 1"),
        ("--processes", "0", "at least 1"),
        ("--num-prompts", "-2", "at least 1"),
        ("--request-rate", "0", "above 0"),
        ("--max-seconds", "inf", "finite"),
        ("--base-url", "ftp://127.0.0.1:1", "http:// or https://"),
        ("--api-key-env", "NOT A NAME", "environment variable name"),
    ],
)
def test_bad_arguments_are_argument_errors_naming_the_flag(tmp_path, flag, value, says):
    args = base_args("http://127.0.0.1:9", tmp_path / "out")
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"argument {flag}" in proc.stderr and says in proc.stderr, proc.stderr


def test_no_key_is_sent_unless_its_variable_is_named(header_server, tmp_path):
    """Before: $OPENAI_API_KEY went to any --base-url by default, over plain http."""
    url, seen = header_server
    proc = run_cli(*base_args(url, tmp_path / "a"), env_extra={"OPENAI_API_KEY": SECRET})
    assert proc.returncode == 0, proc.stderr
    assert seen and not any("authorization" in h for h in seen)
    seen.clear()
    named = base_args(url, tmp_path / "b", "--api-key-env", "GUARD_KEY")
    proc = run_cli(*named, env_extra={"GUARD_KEY": SECRET})
    assert proc.returncode == 0, proc.stderr
    assert seen and all(h.get("authorization") == f"Bearer {SECRET}" for h in seen)


def test_a_named_but_unset_key_variable_stops_before_any_request(header_server, tmp_path):
    url, seen = header_server
    proc = run_cli(*base_args(url, tmp_path / "out", "--api-key-env", "GUARD_KEY_UNSET"))
    assert proc.returncode == 2 and "$GUARD_KEY_UNSET is not set" in proc.stderr
    assert seen == []


def test_a_failed_run_leaves_no_earlier_metrics_to_be_read_as_its_own(tmp_path):
    """Before: a run that died (here: a dataset that cannot be read) left the previous run's
    metrics.json in --out, where it read as this run's result."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps({"status": "done", "completed": 99}))
    (out / "requests.jsonl").write_text("{}\n")
    args = base_args("http://127.0.0.1:9", out)
    args[args.index("random")] = "jsonl"
    proc = run_cli(*args, "--dataset-path", str(tmp_path / "missing.jsonl"))
    assert proc.returncode == 2
    assert not (out / "metrics.json").exists() and not (out / "requests.jsonl").exists()


def test_a_stalled_warmup_is_cut_at_the_time_cap(standin, tmp_path):
    """Stand-in: never answers the first (warm-up) request, answers the rest at once. Before the
    warm-up was outside --max-seconds and the run waited for --request-timeout-s."""
    calls = []

    async def handler(reader, writer):
        while True:
            await standin.read_request(reader)
            calls.append(1)
            if len(calls) == 1:
                await asyncio.sleep(3600)
            writer.write(standin.sse_head() + standin.whole_stream(["a", "b"]))
            await writer.drain()

    out = tmp_path / "out"
    args = base_args(standin.start(handler), out, "--max-seconds", "1", "--grace-s", "0.5")
    started = time.monotonic()
    proc = run_cli(*args, "--request-timeout-s", "100")
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert took < 30, took
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    warm = [x for x in lines if x["warmup"]]
    assert [x["status"] for x in warm] == ["incomplete"]
    assert json.loads((out / "metrics.json").read_text())["completed"] == 2
