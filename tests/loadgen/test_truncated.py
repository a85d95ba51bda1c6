"""A request is complete only when its stream ended as the protocol ends it, with a usage that
is well-formed: stand-in servers on 127.0.0.1 (a healthy llama-server cannot be made to cut a
stream on demand) send cut-off, unterminated, reset and malformed streams through the real
client, and each such request is an error of its own kind while every other one is kept."""

from __future__ import annotations

import json
import socket
import struct
import time

import pytest

from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.loadgen.records import ERROR, OK
from workflow_scripts.loadgen.sse import MAX_EVENT_BYTES

pytestmark = pytest.mark.standin

PROMPTS = [Prompt(i, f"prompt {i}") for i in range(4)]
CLOSE_DELIMITED_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
)


def run(url: str):
    spec = LoadSettings(base_url=url, concurrency=1, max_tokens=8, warmup_requests=0)
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    return load, compute_metrics(load.records, hit_time_cap=load.hit_time_cap)


def test_a_chunked_stream_that_ends_without_done_or_finish_reason_is_truncated(standin):
    """Stand-in: two content chunks, then the body's last chunk: no finish_reason, no [DONE]."""

    async def handler(reader, writer):
        while True:
            await standin.read_request(reader)
            writer.write(
                standin.sse_head()
                + standin.event(standin.content("a"))
                + standin.event(standin.content("b"))
                + standin.chunk(b"")
            )
            await writer.drain()

    load, metrics = run(standin.start(handler))
    assert [r.error for r in load.records] == ["truncated"] * len(PROMPTS)
    assert metrics["completed"] == 0 and metrics["errors_by_reason"] == {"truncated": 4}
    expected = "without [DONE] or a finish_reason after 2 content chunks"
    assert expected in load.records[0].error_detail


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
def test_a_close_delimited_stream_cut_after_one_chunk_is_not_completed(standin, reset):
    """Stand-in: a body that runs to the close; one content chunk, then the connection is closed
    (or reset, SO_LINGER 0). Before the fix every such request counted ok at 1 token."""

    async def handler(reader, writer):
        await standin.read_request(reader)
        writer.write(CLOSE_DELIMITED_HEAD + b"data: " + b'{"choices":[{"index":0,')
        writer.write(b'"delta":{"content":"a"},"finish_reason":null}]}\n\n')
        await writer.drain()
        if reset:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()

    load, metrics = run(standin.start(handler))
    assert metrics["completed"] == 0
    assert all(r.status == ERROR for r in load.records)
    if not reset:  # a reset may surface as the connection's error first; either is not `ok`
        assert {r.error for r in load.records} == {"truncated"}


def test_a_close_delimited_stream_with_a_finish_reason_is_complete(standin):
    """Stand-in: the same framing, but the last chunk carries finish_reason: complete."""

    async def handler(reader, writer):
        await standin.read_request(reader)
        last = {"choices": [{"index": 0, "delta": {"content": "b"}, "finish_reason": "stop"}]}
        body = b"".join(
            b"data: " + json.dumps(e).encode() + b"\n\n" for e in (standin.content("a"), last)
        )
        writer.write(CLOSE_DELIMITED_HEAD + body)
        await writer.drain()
        writer.close()

    load, metrics = run(standin.start(handler))
    assert metrics["completed"] == 4 and all(r.finish_reason == "stop" for r in load.records)


@pytest.mark.parametrize(
    ("usage", "detail"),
    [
        ({"prompt_tokens": 5, "completion_tokens": "12"}, 'usage.completion_tokens is "12"'),
        ({"prompt_tokens": -3, "completion_tokens": 2}, "usage.prompt_tokens is -3"),
        ({"prompt_tokens": 5, "completion_tokens": 1.5}, "usage.completion_tokens is 1.5"),
        ({"prompt_tokens": 5, "completion_tokens": 0}, "0 completion tokens for 2 content chunks"),
    ],
    ids=["string", "negative", "float", "zero-with-content"],
)
def test_a_malformed_usage_fails_that_request_and_keeps_every_other(standin, usage, detail):
    """Stand-in: every other answer carries a malformed usage. Before the fix a string count
    raised TypeError in the client and nothing was written; a negative one gave negative tok/s."""
    served = []

    async def handler(reader, writer):
        while True:
            await standin.read_request(reader)
            served.append(1)
            if len(served) % 2:
                writer.write(standin.sse_head() + standin.whole_stream(["a", "b"]))
            else:
                writer.write(
                    standin.sse_head()
                    + standin.event(standin.content("a"))
                    + standin.event(standin.content("b"))
                    + standin.event({"choices": [], "usage": usage})
                    + standin.event(b"[DONE]")
                    + standin.chunk(b"")
                )
            await writer.drain()

    load, metrics = run(standin.start(handler))
    assert [r.status for r in load.records] == [OK, ERROR, OK, ERROR]
    bad = [r for r in load.records if r.status == ERROR]
    assert {r.error for r in bad} == {"bad_usage"}
    assert all(detail in r.error_detail for r in bad), [r.error_detail for r in bad]
    assert metrics["completed"] == 2 and metrics["completion_tokens"] == 4
    assert metrics["decode_tok_s"] > 0


def test_an_oversized_event_fails_the_request_fast(standin):
    """Stand-in: one SSE line of 4x the cap, sent in pieces. It fails as `oversized_event`
    without buffering the whole line (before: a 64 MB line took 24 s and 356 MB)."""
    piece = b"x" * (1 << 16)

    async def handler(reader, writer):
        while True:
            await standin.read_request(reader)
            writer.write(standin.sse_head())
            writer.write(standin.chunk(b'data: {"choices":[{"delta":{"content":"'))
            for _ in range(4 * MAX_EVENT_BYTES // len(piece)):
                writer.write(standin.chunk(piece))
                await writer.drain()
            writer.write(standin.chunk(b'"}}]}\n\n') + standin.event(b"[DONE]"))
            writer.write(standin.chunk(b""))
            await writer.drain()

    started = time.perf_counter()
    load, metrics = run(standin.start(handler))
    assert {r.error for r in load.records} == {"oversized_event"}
    assert metrics["completed"] == 0
    assert time.perf_counter() - started < 60
