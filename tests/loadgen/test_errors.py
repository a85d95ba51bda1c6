"""Every error kind through real sockets: stand-in servers on 127.0.0.1 send the faulty bytes,
since a healthy llama-server cannot be made to show them on demand. Errors are never counted
completed, and each one lands in `errors_by_reason` under its kind."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.loadgen.records import ERROR

pytestmark = pytest.mark.standin

PROMPTS = [Prompt(i, f"prompt {i}") for i in range(3)]


def run(url: str, **kw):
    spec = LoadSettings(base_url=url, concurrency=1, max_tokens=8, warmup_requests=0, **kw)
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    return load, compute_metrics(load.records, hit_time_cap=load.hit_time_cap)


def assert_all_errors(load, metrics, reason: str) -> None:
    assert [r.status for r in load.records] == [ERROR] * len(PROMPTS)
    assert {r.error for r in load.records} == {reason}
    assert metrics["completed"] == 0 and metrics["incomplete"] == 0
    assert metrics["errors_by_reason"] == {reason: len(PROMPTS)}
    assert all(r.e2e_s is not None and r.e2e_s >= 0 for r in load.records)


def test_http_status(standin):
    """Stand-in: answers 400 with the engine's JSON error body (too long a prompt)."""

    async def handler(reader, writer):
        while True:
            await standin.read_request(reader)
            body = b'{"error":{"code":400,"message":"the request exceeds the context size"}}'
            writer.write(
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()

    load, metrics = run(standin.start(handler))
    assert_all_errors(load, metrics, "http_400")
    assert all("context size" in r.error_detail and r.http_status == 400 for r in load.records)


def test_timeout(standin):
    """Stand-in: reads the request and never answers."""

    async def handler(reader, writer):
        await standin.read_request(reader)
        await asyncio.sleep(3600)

    load, metrics = run(standin.start(handler), request_timeout_s=0.3)
    assert_all_errors(load, metrics, "timeout")


def test_timeout_mid_stream(standin):
    """Stand-in: starts a stream, then stalls."""

    async def handler(reader, writer):
        await standin.read_request(reader)
        writer.write(standin.sse_head() + standin.event(standin.content("a")))
        await writer.drain()
        await asyncio.sleep(3600)

    load, metrics = run(standin.start(handler), request_timeout_s=0.3)
    assert_all_errors(load, metrics, "timeout")


@pytest.mark.parametrize(
    "bad_event",
    [
        b'data: {"error":{"message":"out of memory","code":500}}\n\n',
        b'error: {"code":500,"message":"llama-server style"}\n\n',
    ],
)
def test_streamed_error_object(standin, bad_event):
    """Stand-in: a 200 stream that carries an error object after one token."""

    async def handler(reader, writer):
        while True:
            await standin.read_request(reader)
            writer.write(
                standin.sse_head()
                + standin.event(standin.content("a"))
                + standin.chunk(bad_event)
                + standin.event(b"[DONE]")
                + standin.chunk(b"")
            )
            await writer.drain()

    load, metrics = run(standin.start(handler))
    assert_all_errors(load, metrics, "stream_error")


def test_malformed_sse(standin):
    """Stand-in: a data line that is not JSON."""

    async def handler(reader, writer):
        while True:
            await standin.read_request(reader)
            writer.write(
                standin.sse_head()
                + standin.event(b'{"choices": [ truncated')
                + standin.event(b"[DONE]")
                + standin.chunk(b"")
            )
            await writer.drain()

    load, metrics = run(standin.start(handler))
    assert_all_errors(load, metrics, "malformed_sse")


def test_connection_reset_mid_stream(standin):
    """Stand-in: sends part of a stream, then resets the connection (RST, SO_LINGER 0)."""

    async def handler(reader, writer):
        await standin.read_request(reader)
        writer.write(standin.sse_head() + standin.event(standin.content("a")))
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    load, metrics = run(standin.start(handler))
    assert_all_errors(load, metrics, "connection")
    assert all(r.retries == 0 for r in load.records)  # an answer had begun: never resent


def test_connection_closed_mid_stream(standin):
    """Stand-in: sends part of a stream, then closes cleanly (FIN) without ending the body."""

    async def handler(reader, writer):
        await standin.read_request(reader)
        writer.write(standin.sse_head() + standin.event(standin.content("a")))
        await writer.drain()

    load, metrics = run(standin.start(handler))
    assert_all_errors(load, metrics, "connection")


def test_connection_refused():
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    load, metrics = run(f"http://127.0.0.1:{port}")
    assert_all_errors(load, metrics, "connection")
    assert all("Refused" in r.error_detail or "refused" in r.error_detail for r in load.records)


def test_not_http_at_all(standin):
    """Stand-in: answers with bytes that are no HTTP status line."""

    async def handler(reader, writer):
        await standin.read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    load, metrics = run(standin.start(handler))
    assert_all_errors(load, metrics, "protocol_error")
