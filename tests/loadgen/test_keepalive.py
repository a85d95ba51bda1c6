"""Keep-alive reuse must never turn into errors. Stand-in servers close pooled connections the
ways real ones do (llama-server closes after each streamed answer while advertising keep-alive;
proxies close idle ones), which is what gave aiohttp's pool spurious "Can not write request
body" errors. A healthy server must give zero errors, and connections must still be reused where
the server keeps them."""

from __future__ import annotations

import asyncio

import pytest

from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.prompts import Prompt

pytestmark = pytest.mark.standin

PROMPTS = [Prompt(i, f"prompt {i}") for i in range(24)]


def answering(standin, connections: list, after_answer):
    """Stand-in: answers every request on a connection; `after_answer` says whether to keep
    the connection (True) or how to end it."""

    async def handler(reader, writer):
        connections.append(1)
        while True:
            await standin.read_request(reader)
            writer.write(
                standin.sse_head("Keep-Alive: timeout=5, max=100\r\n")
                + standin.whole_stream(["a", "b", "c"])
            )
            await writer.drain()
            if not await after_answer(reader, writer):
                return

    return handler


def check_clean(load, spec) -> dict:
    metrics = compute_metrics(load.records, hit_time_cap=load.hit_time_cap)
    assert metrics["errors"] == 0, metrics["errors_by_reason"]
    assert metrics["completed"] == len(PROMPTS)
    assert metrics["completion_tokens"] == 3 * len(PROMPTS)
    return metrics


@pytest.mark.parametrize("concurrency", [1, 4, 16])
def test_server_that_closes_after_every_answer(standin, concurrency):
    """Stand-in: closes each connection right after its answer, keep-alive header or not."""
    connections: list = []

    async def close_now(reader, writer):
        return False

    url = standin.start(answering(standin, connections, close_now))
    spec = LoadSettings(base_url=url, concurrency=concurrency, max_tokens=3, warmup_requests=1)
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    metrics = check_clean(load, spec)
    # each worker resends at most twice, then knows to open a fresh connection per request
    assert metrics["retries"] <= 2 * concurrency


def test_server_that_closes_idle_connections(standin):
    """Stand-in: closes a connection that stays idle 30 ms; Poisson gaps make them idle."""
    connections: list = []

    async def close_when_idle(reader, writer):
        try:
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 0.03)
        except (TimeoutError, asyncio.IncompleteReadError):
            return False
        return False  # a request came fast enough; this stand-in still closes after it

    url = standin.start(answering(standin, connections, close_when_idle))
    spec = LoadSettings(
        base_url=url, concurrency=4, max_tokens=3, warmup_requests=0, request_rate=60.0
    )
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    check_clean(load, spec)


def test_connections_are_reused_when_the_server_keeps_them(standin):
    """Stand-in: a well-behaved keep-alive server; count the connections it sees."""
    connections: list = []

    async def keep(reader, writer):
        return True

    url = standin.start(answering(standin, connections, keep))
    spec = LoadSettings(base_url=url, concurrency=4, max_tokens=3, warmup_requests=2)
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    metrics = check_clean(load, spec)
    assert metrics["retries"] == 0
    assert len(connections) == 4 + 2  # one per worker, one per warmup request


def test_connection_close_header_is_honoured(standin):
    """Stand-in: says `Connection: close` and then really closes, a little later."""
    connections: list = []

    async def handler(reader, writer):
        connections.append(1)
        await standin.read_request(reader)
        writer.write(standin.sse_head("Connection: close\r\n") + standin.whole_stream(["a"] * 3))
        await writer.drain()
        await asyncio.sleep(0.2)

    url = standin.start(handler)
    spec = LoadSettings(base_url=url, concurrency=2, max_tokens=3, warmup_requests=0)
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    metrics = check_clean(load, spec)
    assert metrics["retries"] == 0  # never tried to reuse: no resend needed
    assert len(connections) == len(PROMPTS)


def test_several_processes_merge_into_one_run(standin):
    """Stand-in: healthy server; the same load from 2 processes sharing one prompt queue."""
    connections: list = []

    async def keep(reader, writer):
        return True

    url = standin.start(answering(standin, connections, keep))
    spec = LoadSettings(base_url=url, concurrency=4, max_tokens=3, warmup_requests=1, processes=2)
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    check_clean(load, spec)
    measured = [r for r in load.records if not r.warmup]
    assert [r.index for r in measured] == list(range(len(PROMPTS)))  # each prompt exactly once
    assert [r.prompt_index for r in measured] == [p.index for p in PROMPTS]
    assert all(r.sent_s >= 0 for r in measured)  # one clock origin for every process
    # at most one connection per worker and warmup request (a worker whose process started
    # after the queue ran dry opens none)
    assert len(connections) <= 4 + 1
