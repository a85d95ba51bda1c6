"""One request over a worker's keep-alive connection: its body, the connection it reuses or
replaces, and the one resend when the server had already closed that connection."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

from .records import ERROR, INCOMPLETE, OK, RequestRecord
from .settings import LoadSettings
from .wire import Connection, Endpoint


def request_body(
    spec: LoadSettings,
    prompt_text: str,
    messages: list[dict[str, str]] | None = None,
    *,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The request for one prompt; `messages` (a conversation's turn, chat only) replace the
    one user message of `prompt_text`; `max_tokens`, a trace request's own output length,
    replaces the load's and is sent with `ignore_eos` so the answer has that length."""
    body: dict[str, Any] = {
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": spec.temperature,
        "max_tokens": spec.max_tokens,
    }
    if spec.model:
        body["model"] = spec.model
    if spec.endpoint == "chat":
        body["messages"] = messages or [{"role": "user", "content": prompt_text}]
    else:
        body["prompt"] = prompt_text
    if spec.ignore_eos:
        body["ignore_eos"] = True
    if max_tokens is not None:
        body["max_tokens"], body["ignore_eos"] = max_tokens, True
    body.update(spec.extra_body)
    return body


def prompt_sha256(body: dict[str, Any]) -> str:
    """The digest of a request's prompt exactly as sent: a chat's messages (a conversation's
    turn with the history it carried) as canonical JSON, or a completion's text. Two runs'
    requests pair only when it is the same (records.pair_requests)."""
    sent = body["messages"] if "messages" in body else body["prompt"]
    text = json.dumps(sent, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Link:
    """A worker's keep-alive connection, replaced whenever the server has closed it. A server
    that closes every connection after one answer while saying keep-alive (llama-server does)
    is learnt after two such closes: from then on each request opens a fresh connection."""

    STALE_BEFORE_FRESH = 2

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.conn: Connection | None = None
        self.stale = 0
        self.reused_ok = 0

    async def get(self) -> tuple[Connection, bool]:
        """The connection, and whether it is a reused one."""
        if self.conn is not None and self.conn.usable and self.reuse:
            return self.conn, True
        self.drop()
        self.conn = await Connection.open(self.endpoint)
        return self.conn, False

    @property
    def reuse(self) -> bool:
        return self.reused_ok > 0 or self.stale < self.STALE_BEFORE_FRESH

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


async def run_request(
    link: Link, spec: LoadSettings, request: bytes, record: RequestRecord, t0: float
) -> None:
    """Send one request and fill its record; a cancellation (time cap) marks it incomplete."""
    sent = time.perf_counter()
    record.sent_s = sent - t0
    reader = None
    try:
        async with asyncio.timeout(spec.request_timeout_s):
            for attempt in range(2):
                conn, reused = await link.get()
                reader = await conn.exchange(request, record, sent, spec.record_outputs)
                stale = reused and not reader.got_bytes and record.error == "connection"
                if not stale or attempt:
                    if reused and reader.got_bytes:
                        link.reused_ok += 1
                    break
                link.stale += 1
                # The server had closed this keep-alive connection as the request went out, and
                # sent nothing: resend once on a fresh connection. Nothing was measured, so the
                # clock restarts.
                record.retries += 1
                record.status, record.error, record.error_detail = INCOMPLETE, None, None
                record.output = None
                sent = time.perf_counter()
                record.sent_s = sent - t0
    except asyncio.CancelledError:
        link.drop()
        if record.status != OK:  # an answer already complete before the cut stays complete
            record.status = INCOMPLETE
            record.e2e_s = time.perf_counter() - sent
            raise
        record.e2e_s = reader.stream_end_s - sent
        raise
    except TimeoutError:
        link.drop()
        record.status, record.error = ERROR, "timeout"
        record.error_detail = f"no complete answer within {spec.request_timeout_s} s"
    except OSError as exc:
        link.drop()
        record.status, record.error = ERROR, "connection"
        record.error_detail = f"{type(exc).__name__}: {exc}"[:500]
    ended = reader.stream_end_s if reader is not None and record.error != "timeout" else None
    record.e2e_s = (ended if ended is not None else time.perf_counter()) - sent
