"""A fast OpenAI-compatible streaming server that paces every stream like an engine does.

It exists to measure load *clients*: it does no inference, so all it costs is the bytes it writes.
Like a continuously batched engine it runs one decode step every 1/rate seconds and gives each
active stream one token (one SSE chunk) per step, shaped as llama-server's chunks are. Each chunk's
content is the monotonic clock (CLOCK_MONOTONIC, shared by all processes) just before its write,
so a client's recorded arrival minus this stamp is the latency the client adds.

    python benchmarks/pacing_server.py --port 8123 --chunks-per-s 200 --cpu 0

Endpoints: POST /v1/chat/completions and /v1/completions (`max_tokens` or
`max_completion_tokens` chunks, default 256; `stream` true or false), GET /v1/models, /health,
/metrics (llama-server's counter names), /stats (JSON: counters and the serving window),
GET /stamps (JSON: per request tag, the stamps written).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import time

MODEL_ID = "pacing"
_TAG = re.compile(rb"req-(\d+)")
_CHAT_HEAD = b'{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"@'
_CHAT_TAIL = (
    b'"}}],"created":1700000000,"id":"chatcmpl-pacing","model":"pacing",'
    b'"system_fingerprint":"b0-pacing","object":"chat.completion.chunk"}'
)
_TEXT_HEAD = b'{"choices":[{"finish_reason":null,"index":0,"text":"@'
_TEXT_TAIL = (
    b'"}],"created":1700000000,"id":"cmpl-pacing","model":"pacing","object":"text_completion"}'
)


def _frame(payload: bytes) -> bytes:
    """One HTTP chunk holding one SSE event."""
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


class Stats:
    """What the server itself counted: the reference the client's figures are checked against."""

    def __init__(self) -> None:
        self.requests = 0
        self.completed = 0
        self.chunks = 0
        self.prompt_tokens = 0
        self.first_request_s: float | None = None
        self.last_done_s: float | None = None
        self.stamps: dict[str, list[float]] = {}

    def as_dict(self) -> dict:
        return {
            "requests": self.requests,
            "completed": self.completed,
            "tokens_predicted": self.chunks,
            "prompt_tokens": self.prompt_tokens,
            "first_request_s": self.first_request_s,
            "last_done_s": self.last_done_s,
        }


class Stream:
    __slots__ = ("transport", "left", "total", "head", "tail", "chat", "stamps", "prompt_tokens")

    def __init__(self, transport, total, chat, stamps, prompt_tokens) -> None:
        self.transport = transport
        self.left = self.total = total
        self.chat = chat
        self.head, self.tail = (_CHAT_HEAD, _CHAT_TAIL) if chat else (_TEXT_HEAD, _TEXT_TAIL)
        self.stamps = stamps
        self.prompt_tokens = prompt_tokens


class Engine:
    """One decode step every 1/rate s; each active stream gets one chunk per step."""

    def __init__(self, chunks_per_s: float, stats: Stats, keep_stamps: bool) -> None:
        self.interval_s = 1.0 / chunks_per_s
        self.stats = stats
        self.keep_stamps = keep_stamps
        self.active: list[Stream] = []
        self.wake = asyncio.Event()

    def add(self, stream: Stream) -> None:
        self.active.append(stream)
        self.wake.set()

    async def run(self) -> None:
        clock = time.perf_counter
        while True:
            if not self.active:
                self.wake.clear()
                await self.wake.wait()
                next_step = clock()
            self.step(clock)
            next_step += self.interval_s
            delay = next_step - clock()
            if delay < 0:  # behind: do not burst to catch up, as an overloaded engine would not
                next_step = clock()
                delay = 0
            await asyncio.sleep(delay)

    def step(self, clock) -> None:
        still = []
        stats = self.stats
        for s in self.active:
            if s.transport.is_closing():
                continue
            stamp = clock()
            data = _frame(b"%s%.6f%s" % (s.head, stamp, s.tail))
            s.left -= 1
            if s.stamps is not None:
                s.stamps.append(stamp)
            if s.left == 0:
                data += self._ending(s)
                stats.completed += 1
                stats.last_done_s = clock()
            else:
                still.append(s)
            s.transport.write(data)
            stats.chunks += 1
        self.active = still

    @staticmethod
    def _ending(s: Stream) -> bytes:
        finish = (
            {"choices": [{"finish_reason": "length", "index": 0, "delta": {}}]}
            if s.chat
            else {"choices": [{"finish_reason": "length", "index": 0, "text": ""}]}
        )
        usage = {
            "choices": [],
            "usage": {
                "prompt_tokens": s.prompt_tokens,
                "completion_tokens": s.total,
                "total_tokens": s.prompt_tokens + s.total,
            },
        }
        return (
            _frame(json.dumps(finish).encode())
            + _frame(json.dumps(usage).encode())
            + _frame(b"[DONE]")
            + b"0\r\n\r\n"
        )


def _response(status: str, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status.encode(),
        content_type,
        len(body),
        body,
    )


class PacingProtocol(asyncio.Protocol):
    """HTTP/1.1 with keep-alive; one request at a time per connection."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.buf = b""
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                key, _, value = line.partition(":")
                headers[key.strip().lower()] = value.strip()
            length = int(headers.get("content-length", 0))
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self.handle(method, path.split("?", 1)[0], body)

    def handle(self, method: str, path: str, body: bytes) -> None:
        stats = self.engine.stats
        if method == "GET" and path in ("/health", "/v1/health"):
            self.transport.write(_response("200 OK", b'{"status":"ok"}'))
        elif method == "GET" and path == "/v1/models":
            models = {"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]}
            self.transport.write(_response("200 OK", json.dumps(models).encode()))
        elif method == "GET" and path == "/metrics":
            text = (
                f"llamacpp:prompt_tokens_total {stats.prompt_tokens}\n"
                f"llamacpp:tokens_predicted_total {stats.chunks}\n"
                f"llamacpp:prompt_tokens_cached_total 0\n"
            )
            self.transport.write(_response("200 OK", text.encode(), b"text/plain"))
        elif method == "GET" and path == "/stats":
            self.transport.write(_response("200 OK", json.dumps(stats.as_dict()).encode()))
        elif method == "GET" and path == "/stamps":
            self.transport.write(_response("200 OK", json.dumps(stats.stamps).encode()))
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            self.completion(path.endswith("chat/completions"), body)
        else:
            self.transport.write(_response("404 Not Found", b'{"error":"not found"}'))

    def completion(self, chat: bool, body: bytes) -> None:
        stats = self.engine.stats
        now = time.perf_counter()
        if stats.first_request_s is None:
            stats.first_request_s = now
        stats.requests += 1
        req = json.loads(body)
        chunks = int(req.get("max_tokens") or req.get("max_completion_tokens") or 256)
        text = json.dumps(req.get("messages") or req.get("prompt") or "")
        prompt_tokens = max(1, len(text.split()))
        stats.prompt_tokens += prompt_tokens
        stamps = None
        if self.engine.keep_stamps:
            match = _TAG.search(body)
            if match:
                stamps = stats.stamps.setdefault(match.group(1).decode(), [])
        if req.get("stream"):
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            self.engine.add(Stream(self.transport, chunks, chat, stamps, prompt_tokens))
        else:
            asyncio.get_running_loop().create_task(self.whole(chat, chunks, prompt_tokens))

    async def whole(self, chat: bool, chunks: int, prompt_tokens: int) -> None:
        """A non-streamed answer, after as many decode steps as it has tokens."""
        await asyncio.sleep(chunks * self.engine.interval_s)
        text = "x " * chunks
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": text}}
            if chat
            else {"index": 0, "text": text}
        )
        choice["finish_reason"] = "length"
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": chunks}
        stats = self.engine.stats
        stats.chunks += chunks
        stats.completed += 1
        stats.last_done_s = time.perf_counter()
        body = json.dumps({"choices": [choice], "usage": usage, "model": MODEL_ID}).encode()
        if not self.transport.is_closing():
            self.transport.write(_response("200 OK", body))


async def serve(host: str, port: int, chunks_per_s: float, keep_stamps: bool) -> None:
    loop = asyncio.get_running_loop()
    engine = Engine(chunks_per_s, Stats(), keep_stamps)
    server = await loop.create_server(lambda: PacingProtocol(engine), host, port, backlog=1024)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = asyncio.create_task(engine.run())
    print(f"pacing server on http://{host}:{port} at {chunks_per_s} chunks/s a stream", flush=True)
    await stop.wait()
    runner.cancel()
    server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--chunks-per-s", type=float, default=200.0)
    parser.add_argument("--cpu", type=int, default=None, help="pin to this core")
    parser.add_argument("--no-stamps", action="store_true", help="do not keep stamps for /stamps")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    asyncio.run(serve(args.host, args.port, args.chunks_per_s, not args.no_stamps))


if __name__ == "__main__":
    main()
