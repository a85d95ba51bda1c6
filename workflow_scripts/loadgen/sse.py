"""Bytes of one HTTP/1.1 streaming response -> its request record, incrementally and without I/O.

The parsers here are pure: they are fed bytes with the time they arrived and fill a
`RequestRecord`, so every figure can be tested on hand-made byte streams split at any point.
They are also the client's hot path (one call per received packet), hence the plain loops.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .records import ERROR, OK, RequestRecord

try:  # optional: about 3x faster on small objects; every result is checked against json's rules
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - depends on the environment
    _fast_loads = None

MAX_DETAIL = 500
# One SSE line (one event of a stream): an OpenAI chunk is a few hundred bytes, a whole answer
# sent as one event rarely past a hundred KB. A line past this fails the request instead of
# growing the buffer without bound (uncapped, a 64 MB line costs about 24 s and 356 MB).
MAX_EVENT_BYTES = 1 << 20
# Why a request did not complete (besides `http_<status>`, `connection`, `stream_error`, ...).
TRUNCATED = "truncated"
BAD_USAGE = "bad_usage"
OVERSIZED_EVENT = "oversized_event"


def loads(payload: bytes) -> Any:
    """json.loads, through orjson when present; orjson's stricter refusals (e.g. lone surrogate
    escapes, NaN) fall back to json so the two never disagree on what is malformed."""
    if _fast_loads is not None:
        try:
            return _fast_loads(payload)
        except ValueError:
            pass
    return json.loads(payload)


@dataclass(frozen=True)
class ResponseHead:
    status: int
    headers: dict[str, str]
    keep_alive: bool

    @property
    def chunked(self) -> bool:
        return "chunked" in self.headers.get("transfer-encoding", "").lower()

    @property
    def content_length(self) -> int | None:
        value = self.headers.get("content-length")
        return int(value) if value is not None and value.strip().isdigit() else None


class ProtocolError(ValueError):
    """Bytes that are not an HTTP/1.x response."""


def parse_head(raw: bytes) -> ResponseHead:
    """Status line and headers (without the blank line) -> ResponseHead."""
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep:
            headers[key.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    http10 = parts[0] == "HTTP/1.0"
    keep_alive = "keep-alive" in connection if http10 else "close" not in connection
    return ResponseHead(int(parts[1]), headers, keep_alive)


class ChunkedDecoder:
    """Transfer-Encoding: chunked -> payload bytes; `done` after the last chunk and trailers."""

    __slots__ = ("buf", "left", "state", "done")

    SIZE, DATA, DATA_END, TRAILER = range(4)

    def __init__(self) -> None:
        self.buf = b""
        self.left = 0
        self.state = self.SIZE
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buf = self.buf + data if self.buf else data
        out = []
        pos = 0
        end = len(buf)
        while pos < end and not self.done:
            state = self.state
            if state == self.DATA:
                take = min(self.left, end - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self.left -= take
                if self.left == 0:
                    self.state = self.DATA_END
                continue
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                break
            line = buf[pos:nl]
            pos = nl + 2
            if state == self.SIZE:
                try:
                    self.left = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size line {line[:40]!r}") from None
                self.state = self.DATA if self.left else self.TRAILER
            elif state == self.DATA_END:
                if line:
                    raise ProtocolError("chunk data longer than its size line said")
                self.state = self.SIZE
            elif not line:  # TRAILER: a blank line ends the body
                self.done = True
        self.buf = buf[pos:] if pos < end else b""
        return out[0] if len(out) == 1 else b"".join(out)


def apply_event(
    record: RequestRecord, event: Any, elapsed_s: float, output: list[str] | None = None
) -> None:
    """Fold one parsed JSON event (a stream chunk, or a whole non-streamed answer) into the
    record. TTFT and chunk times count only chunks whose text is non-empty (docs/metrics.md),
    reasoning included; `output`, when given, gets the answer's own text (`content`, or a
    completion's `text`), never the reasoning."""
    if not isinstance(event, dict):
        raise ValueError("event is not a JSON object")
    if ("error" in event and not event.get("choices")) or event.get("object") == "error":
        record.status = ERROR
        record.error = "stream_error"
        err = event.get("error", event)
        record.error_detail = (err if isinstance(err, str) else json.dumps(err))[:MAX_DETAIL]
        return
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or choice.get("message")
        if delta is not None:
            answer = delta.get("content")
            text = answer or delta.get("reasoning_content") or delta.get("reasoning")
        else:
            answer = text = choice.get("text")
        if output is not None and answer and isinstance(answer, str):
            output.append(answer)
        if text:
            if record.ttft_s is None:
                record.ttft_s = elapsed_s
            record.chunk_times_s.append(elapsed_s)
        if choice.get("finish_reason"):
            record.finish_reason = choice["finish_reason"]
    usage = event.get("usage")
    if usage:
        problem = usage_problem(usage)
        if problem:
            record.status = ERROR
            record.error = BAD_USAGE
            record.error_detail = problem[:MAX_DETAIL]
            return
        record.prompt_tokens = usage.get("prompt_tokens")
        record.completion_tokens = usage.get("completion_tokens")
    timings = event.get("timings")
    if timings:
        record.timings = timings
    sglext = event.get("sglext")
    if isinstance(sglext, dict) and isinstance(sglext.get("spec_tokens_details"), dict):
        record.spec_details = sglext["spec_tokens_details"]


def usage_problem(usage: Any) -> str | None:
    """What is wrong with a `usage` object, None when its counts are well-formed: each count
    absent, null or a non-negative integer (a string "12" or -3 would corrupt every sum)."""
    if not isinstance(usage, dict):
        return f"usage is not an object: {json.dumps(usage)[:200]}"
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key)
        if value is not None and (type(value) is not int or value < 0):
            return f"usage.{key} is {json.dumps(value)[:100]}, not a non-negative integer"
    return None


def finish_record(record: RequestRecord, terminated: bool = True) -> None:
    """After the stream ended. Complete only when it ended as the protocol ends it
    (`terminated`: `[DONE]` or a `finish_reason`, which vLLM, SGLang and llama-server all send)
    and its usage agrees with what arrived; else an error. Without usage: chunk counts."""
    if record.status == ERROR:
        return
    if not terminated:
        record.status = ERROR
        record.error = TRUNCATED
        record.error_detail = (
            f"the stream ended without [DONE] or a finish_reason after "
            f"{record.content_chunks} content chunks"
        )
        return
    if record.completion_tokens == 0 and record.content_chunks:
        record.status = ERROR
        record.error = BAD_USAGE
        record.error_detail = (
            f"usage says 0 completion tokens for {record.content_chunks} content chunks"
        )
        return
    if record.completion_tokens is None:
        record.completion_tokens = record.content_chunks
        record.token_count_source = "chunks"
    record.status = OK


class ResponseReader:
    """One response's bytes -> its record. `feed(data, now)` per packet; `feed_eof(now)` when the
    peer closed. `stream_end_s` is set once the answer is over (`[DONE]`, an error, or the end of
    the body), and with it the record's `output` when `keep_output` (the text's pieces are held
    until then, then joined once); `body_done` once every byte of the response is in, so the
    connection can be reused.
    """

    def __init__(self, record: RequestRecord, sent_s: float, keep_output: bool = True) -> None:
        self.record = record
        self.sent_s = sent_s
        self._output: list[str] | None = [] if keep_output else None
        self.head: ResponseHead | None = None
        self.got_bytes = False
        self.stream_end_s: float | None = None
        self.body_done = False
        self._head_buf = b""
        self._chunked: ChunkedDecoder | None = None
        self._length_left: int | None = None
        self._mode = "sse"  # sse | json | error
        self._collected: list[bytes] = []
        self._line_buf = b""
        self._data_lines: list[bytes] = []
        self._event_bytes = 0
        self._event_type = b""
        self._answered = False  # [DONE], or a whole JSON answer

    @property
    def keep_alive(self) -> bool:
        return self.body_done and self.head is not None and self.head.keep_alive

    # -- framing -----------------------------------------------------------------------------

    def feed(self, data: bytes, now: float) -> None:
        self.got_bytes = True
        if self.body_done:
            return
        if self.head is None:
            buf = self._head_buf + data
            while True:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    self._head_buf = buf
                    return
                head = parse_head(buf[:end])
                buf = buf[end + 4 :]
                if head.status >= 200:  # skip 1xx interim answers
                    break
            self._start_body(head, now)
            data = buf
            if not data and not self.body_done:
                return
        if self._chunked is not None:
            payload = self._chunked.feed(data)
            if payload:
                self._body(payload, now)
            if self._chunked.done:
                self._end_body(now)
        elif self._length_left is not None:
            payload = data[: self._length_left]
            self._length_left -= len(payload)
            if payload:
                self._body(payload, now)
            if self._length_left == 0:
                self._end_body(now)
        else:
            self._body(data, now)  # read until the peer closes

    def feed_eof(self, now: float) -> None:
        """The peer closed. Ends a body that runs to the close; anything else is cut short."""
        if self.body_done:
            return
        if self.head is not None and self._chunked is None and self._length_left is None:
            self._end_body(now)
            return
        if self.stream_end_s is None:
            when = "mid-response" if self.got_bytes else "before answering"
            self.fail("connection", f"the server closed the connection {when}", now)
        self.body_done = True

    def _start_body(self, head: ResponseHead, now: float) -> None:
        self.head = head
        self.record.http_status = head.status
        if head.status != 200:
            self._mode = "error"
        elif "json" in head.headers.get("content-type", "").lower():
            self._mode = "json"  # a server that answered a streamed request in one piece
        if head.chunked:
            self._chunked = ChunkedDecoder()
        elif head.content_length is not None:
            self._length_left = head.content_length
        if self._length_left == 0:
            self._end_body(now)

    def _body(self, payload: bytes, now: float) -> None:
        if self._mode == "sse":
            if self.stream_end_s is None:
                self._sse(payload, now)
        elif sum(map(len, self._collected)) < 1 << 20:
            self._collected.append(payload)

    def _end_body(self, now: float) -> None:
        self.body_done = True
        if self.stream_end_s is not None:
            return
        body = b"".join(self._collected)
        if self._mode == "error":
            status = self.head.status if self.head else 0
            self.fail(f"http_{status}", body[:MAX_DETAIL].decode("utf-8", "replace"), now)
            return
        if self._mode == "json":  # one whole answer: a body that parses is complete
            self._answered = True
            self._data(body, now)
        else:
            if self._line_buf:
                self._sse(b"\n", now)
            if self._data_lines:
                self._sse(b"\n", now)
        if self.stream_end_s is None:
            self._finish(now)  # the body ended: complete only if the stream said it was over

    # -- server-sent events ------------------------------------------------------------------

    def _sse(self, payload: bytes, now: float) -> None:
        buf = self._line_buf + payload if self._line_buf else payload
        pos = 0
        while self.stream_end_s is None:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            line = buf[pos:nl]
            pos = nl + 1
            if line[-1:] == b"\r":
                line = line[:-1]
            if line.startswith(b"data:"):
                self._data_lines.append(line[6:] if line[5:6] == b" " else line[5:])
                self._event_bytes += len(line)
                if self._event_bytes > MAX_EVENT_BYTES:
                    self._oversized(now)
                    return
            elif not line:
                if self._data_lines:
                    data = (
                        self._data_lines[0]
                        if len(self._data_lines) == 1
                        else b"\n".join(self._data_lines)
                    )
                    self._data_lines = []
                    self._event_bytes = 0
                    self._dispatch(data, now)
                self._event_type = b""
            elif line.startswith(b"event:"):
                self._event_type = line[6:].strip()
            elif line.startswith(b"error:"):  # llama-server's own way to stream an error
                self.fail("stream_error", line[6:].strip().decode("utf-8", "replace"), now)
            # comments (":...") and other fields (id, retry) carry nothing we measure
        self._line_buf = buf[pos:] if pos < len(buf) else b""
        if len(self._line_buf) > MAX_EVENT_BYTES:
            self._oversized(now)

    def _oversized(self, now: float) -> None:
        self._line_buf, self._data_lines = b"", []
        self.fail(OVERSIZED_EVENT, f"an SSE event over {MAX_EVENT_BYTES} bytes", now)

    def _dispatch(self, data: bytes, now: float) -> None:
        if data == b"[DONE]":
            self._answered = True
            self._finish(now)
            return
        if self._event_type == b"error":
            self.fail("stream_error", data.decode("utf-8", "replace"), now)
            return
        self._data(data, now)

    def _data(self, data: bytes, now: float) -> None:
        try:
            event = loads(data)
            apply_event(self.record, event, now - self.sent_s, self._output)
        except (ValueError, AttributeError, TypeError):
            self.fail("malformed_sse", data[:200].decode("utf-8", "replace"), now)
            return
        if self.record.status == ERROR:
            self._end(now)

    # -- outcomes ----------------------------------------------------------------------------

    def _end(self, now: float) -> None:
        """The answer is over: its end time, and its text into the record."""
        self.stream_end_s = now
        if self._output is not None:
            self.record.output = "".join(self._output)
            self._output = []

    def _finish(self, now: float) -> None:
        self._end(now)
        finish_record(self.record, self._answered or self.record.finish_reason is not None)

    def fail(self, reason: str, detail: str, now: float) -> None:
        """End the answer as an error of this kind (the first error wins)."""
        if self.stream_end_s is not None:
            return
        self.record.status = ERROR
        self.record.error = reason
        self.record.error_detail = detail[:MAX_DETAIL]
        self._end(now)


def read_response(
    record: RequestRecord, packets: list[tuple[bytes, float]], eof_s: float | None = None
) -> ResponseReader:
    """Feed a whole response given as (bytes, arrival time) packets: the pure path tests use."""
    reader = ResponseReader(record, 0.0)
    for data, now in packets:
        reader.feed(data, now)
    if eof_s is not None:
        reader.feed_eof(eof_s)
    if reader.stream_end_s is not None:
        record.e2e_s = reader.stream_end_s - reader.sent_s
    return reader
