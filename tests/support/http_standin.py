"""The HTTP/1.1 a stand-in server speaks, one definition each: a request read off an asyncio
stream (`read_request`), a chunk of a chunked body (`chunk`), an SSE event in one chunk
(`event`), a streamed answer's head (`sse_head`), and a whole answer with its length (`plain`,
`error`, as llama-server writes them).

Standard library only, and nothing else of tests/ imported: the stand-in servers the pipeline
launches as `native` engines (fixtures/sweeps/law_server.py, fixtures/faults/scripted_server.py)
import it in their own process, after putting the repository on sys.path, as the in-process
stand-ins of tests/conftest.py import it in pytest's."""

from __future__ import annotations

import asyncio
import json
from typing import NamedTuple

KEEP_ALIVE = "Connection: keep-alive\r\n"


class Request(NamedTuple):
    """One request: method, target (path and query), headers (names lower-cased), body."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes


async def read_request(reader: asyncio.StreamReader) -> Request:
    """The next request on the connection: its head up to the blank line, then Content-Length
    bytes of body (none without the header). A repeated header keeps its last value. Raises
    asyncio.IncompleteReadError once the client has gone, ValueError on a head that is not
    HTTP."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep:
            headers[key.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    return Request(method, target, headers, await reader.readexactly(length))


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body; empty data is the last chunk, which ends the body."""
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n"


def event(obj: object) -> bytes:
    """One SSE data event (a JSON value, or bytes as given) in one chunk."""
    payload = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return chunk(b"data: " + payload + b"\n\n")


def sse_head(extra: str = "") -> bytes:
    """The head of a 200 chunked event stream; `extra` holds more header lines, each ending
    in CRLF."""
    return (
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        f"Transfer-Encoding: chunked\r\n{extra}\r\n"
    ).encode()


def plain(status: int, reason: str, body: object, content_type: str = "application/json") -> bytes:
    """A whole keep-alive answer with its Content-Length: bytes as given, else the body as JSON."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(data)}\r\n{KEEP_ALIVE}\r\n"
    ).encode() + data


def error(status: int, reason: str, message: str, kind: str) -> bytes:
    """An error answer with llama-server's JSON error body."""
    return plain(status, reason, {"error": {"code": status, "message": message, "type": kind}})


def content(text: str) -> dict:
    """A streamed chat chunk that carries `text`."""
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
