"""A lean HTTP/1.1 client on an asyncio protocol: the socket edge of the load generator.

Why not aiohttp: per streamed chunk it wakes a coroutine and splits lines in Python; here each
received packet goes straight into the pure `ResponseReader` inside `data_received`, and the
request's coroutine wakes once, when its answer is over. That is most of the client's CPU cost.

Keep-alive: a worker reuses its connection only after a response was read to its end and the
server did not ask to close; a connection the server has since closed is seen (EOF) and replaced
before use, and the rare race (closed while the request was in flight, before any answer byte)
is for the caller to retry on a fresh connection.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .records import OK, RequestRecord
from .sse import ProtocolError, ResponseReader

BODY_END_WAIT_S = 1.0  # after [DONE], how long to wait for the body's last bytes to reuse a link


@dataclass(frozen=True)
class Endpoint:
    """Where requests go: scheme, host, port and any path prefix of the base URL."""

    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def from_base_url(cls, base_url: str) -> Endpoint:
        parts = urlsplit(base_url if "://" in base_url else "http://" + base_url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"base URL must be http or https: {base_url}")
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):  # accept ".../v1" as well as the server root
            prefix = prefix[:-3]
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname or "127.0.0.1", port, prefix)

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"

    def request(self, path: str, body: dict[str, Any], api_key: str | None = None) -> bytes:
        """The full bytes of one POST with a JSON body."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        lines = [
            f"POST {self.prefix}{path} HTTP/1.1",
            f"Host: {self.host_header}",
            "User-Agent: llmbench-loadgen",
            "Content-Type: application/json",
            "Accept: text/event-stream",
            f"Content-Length: {len(payload)}",
        ]
        if api_key:
            lines.append(f"Authorization: Bearer {api_key}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload

    def ssl_context(self):
        if self.scheme != "https":
            return None
        import ssl

        return ssl.create_default_context()


RECV_BUFFER_BYTES = 1 << 16


class _StreamProtocol(asyncio.BufferedProtocol):
    """Feeds each packet to the current ResponseReader; wakes the waiter when it is done.

    A buffered protocol: the transport receives into one buffer per connection. A plain
    protocol gets a fresh 256 KiB bytes object per read, which glibc maps and unmaps: three
    extra system calls per streamed chunk, half the client's CPU time."""

    def __init__(self) -> None:
        self.buffer = bytearray(RECV_BUFFER_BYTES)
        self.view = memoryview(self.buffer)
        self.transport: asyncio.Transport | None = None
        self.reader: ResponseReader | None = None
        self.waiter: asyncio.Future | None = None
        self.want_body = False
        self.closed = False
        self.close_detail = ""

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.view

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self.view[:nbytes]))

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        if reader is None or reader.body_done:
            self.closed = True  # bytes nobody asked for: this link is not trustworthy
            self.transport.close()
            return
        try:
            reader.feed(data, time.perf_counter())
        except ProtocolError as exc:
            reader.fail("protocol_error", str(exc), time.perf_counter())
            reader.body_done = True
            self.closed = True
            self.transport.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        reader = self.reader
        if self.closed or (reader.body_done if self.want_body else reader.stream_end_s is not None):
            waiter.set_result(None)

    def eof_received(self) -> bool:
        self.closed = True
        if self.reader is not None:
            self.reader.feed_eof(time.perf_counter())
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        reader = self.reader
        if reader is not None and not reader.body_done:
            reader.feed_eof(time.perf_counter())
            if exc is not None and reader.record.error == "connection":
                reader.record.error_detail = f"{type(exc).__name__}: {exc}"[:500]
        self._wake()


class Connection:
    """One keep-alive HTTP/1.1 connection; one exchange at a time."""

    def __init__(self, transport: asyncio.Transport, protocol: _StreamProtocol) -> None:
        self.transport = transport
        self.protocol = protocol
        self.exchanges = 0

    @classmethod
    async def open(cls, endpoint: Endpoint) -> Connection:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_connection(
            _StreamProtocol, endpoint.host, endpoint.port, ssl=endpoint.ssl_context()
        )
        return cls(transport, protocol)

    @property
    def usable(self) -> bool:
        reader = self.protocol.reader
        return (
            not self.protocol.closed
            and not self.transport.is_closing()
            and (reader is None or reader.keep_alive)
        )

    def close(self) -> None:
        self.protocol.closed = True
        self.protocol.reader = None  # what the socket does from now on is no request's business
        self.transport.abort()

    async def exchange(
        self, request: bytes, record: RequestRecord, sent_s: float, keep_output: bool = True
    ) -> ResponseReader:
        """Send `request`, fill `record` from the answer (its text too when `keep_output`);
        return once the answer is over and the connection is either clean for reuse or closed."""
        protocol = self.protocol
        if protocol.closed:
            raise ConnectionResetError("the connection was closed before the request went out")
        loop = asyncio.get_running_loop()
        reader = ResponseReader(record, sent_s, keep_output)
        protocol.reader = reader
        protocol.want_body = False
        protocol.waiter = loop.create_future()
        self.exchanges += 1
        try:
            self.transport.write(request)
            await protocol.waiter
            if not reader.body_done and not protocol.closed and record.status == OK:
                protocol.want_body = True
                protocol.waiter = loop.create_future()
                protocol._wake()
                try:
                    await asyncio.wait_for(protocol.waiter, BODY_END_WAIT_S)
                except TimeoutError:
                    self.close()
        except BaseException:
            self.close()  # cancelled or timed out: never reuse a half-read connection
            raise
        if not reader.keep_alive:
            self.close()
        return reader
