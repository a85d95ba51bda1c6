"""The async streaming client: closed loop of `concurrency` workers, optional Poisson arrivals,
a hard time cap with grace and cancellation, and one raw record per request."""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .datasets import Prompt
from .records import ERROR, INCOMPLETE, OK, RequestRecord

WARMUP_PROMPT = "Write a short paragraph about the sea."


@dataclass(frozen=True)
class LoadSpec:
    """How to load a server. `api_key` is sent as a header and never written anywhere."""

    base_url: str
    concurrency: int
    max_tokens: int
    model: str | None = None
    endpoint: str = "chat"
    temperature: float = 0.0
    ignore_eos: bool = False
    request_rate: float | None = None
    max_seconds: float | None = None
    grace_s: float = 30.0
    warmup_requests: int = 1
    request_timeout_s: float = 600.0
    arrival_seed: int = 0
    api_key: str | None = field(default=None, repr=False)
    extra_body: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        path = "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"
        return self.base_url.rstrip("/") + path

    def public(self) -> dict[str, Any]:
        """The spec as recorded in results: everything but the key."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "api_key"}
        out["api_key_set"] = self.api_key is not None
        return out


@dataclass
class LoadResult:
    records: list[RequestRecord]
    hit_time_cap: bool
    not_started: int
    started_at: float
    finished_at: float


class _RetryableBeforeResponse(Exception):
    """The connection broke before any response byte: the server never saw the request."""


def request_body(spec: LoadSpec, prompt_text: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": spec.temperature,
        "max_tokens": spec.max_tokens,
    }
    if spec.model:
        body["model"] = spec.model
    if spec.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt_text}]
    else:
        body["prompt"] = prompt_text
    if spec.ignore_eos:
        body["ignore_eos"] = True
    body.update(spec.extra_body)
    return body


def apply_event(record: RequestRecord, event: dict[str, Any], elapsed_s: float) -> None:
    """Fold one parsed SSE event into the record (pure: no I/O, no clock)."""
    if "error" in event and not event.get("choices"):
        record.status = ERROR
        record.error = "stream_error"
        err = event["error"]
        record.error_detail = json.dumps(err)[:500] if not isinstance(err, str) else err[:500]
        return
    for choice in event.get("choices") or ():
        delta = choice.get("delta")
        text = (
            (delta.get("content") or delta.get("reasoning_content"))
            if delta
            else choice.get("text")
        )
        if text:
            if record.ttft_s is None:
                record.ttft_s = elapsed_s
            record.chunk_times_s.append(elapsed_s)
        if choice.get("finish_reason"):
            record.finish_reason = choice["finish_reason"]
    usage = event.get("usage")
    if usage:
        record.prompt_tokens = usage.get("prompt_tokens")
        record.completion_tokens = usage.get("completion_tokens")
    if "timings" in event:
        record.timings = event["timings"]


def finish_record(record: RequestRecord) -> None:
    """After the stream ended: fall back to chunk counts when the server sent no usage."""
    if record.status == ERROR:
        return
    if record.completion_tokens is None:
        record.completion_tokens = record.content_chunks
        record.token_count_source = "chunks"
    record.status = OK


async def _stream(
    session: aiohttp.ClientSession,
    spec: LoadSpec,
    body: dict,
    headers: dict,
    record: RequestRecord,
    sent: float,
) -> None:
    got_response = False
    try:
        async with session.post(spec.url, json=body, headers=headers) as resp:
            got_response = True
            record.http_status = resp.status
            if resp.status != 200:
                record.status = ERROR
                record.error = f"http_{resp.status}"
                record.error_detail = (await resp.text())[:500]
                return
            async for line in resp.content:
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                now = time.perf_counter()
                try:
                    event = json.loads(payload)
                except ValueError:
                    record.status = ERROR
                    record.error = "malformed_sse"
                    record.error_detail = payload[:200].decode("utf-8", "replace")
                    return
                apply_event(record, event, now - sent)
                if record.status == ERROR:
                    return
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        if not got_response:
            raise _RetryableBeforeResponse(str(exc)) from exc
        raise
    finish_record(record)


@dataclass
class Sessions:
    """A pooled keep-alive session, and one that opens a fresh connection per request for the
    single retry of a request whose pooled connection the server had already closed."""

    pooled: aiohttp.ClientSession
    fresh: aiohttp.ClientSession

    @classmethod
    def open(cls, spec: LoadSpec) -> Sessions:
        timeout = aiohttp.ClientTimeout(total=spec.request_timeout_s)
        pooled = aiohttp.TCPConnector(limit=spec.concurrency + spec.warmup_requests)
        fresh = aiohttp.TCPConnector(limit=0, force_close=True)
        return cls(
            aiohttp.ClientSession(timeout=timeout, connector=pooled),
            aiohttp.ClientSession(timeout=timeout, connector=fresh),
        )

    async def close(self) -> None:
        await self.pooled.close()
        await self.fresh.close()


async def run_request(
    sessions: Sessions, spec: LoadSpec, prompt_text: str, record: RequestRecord, t0: float
) -> None:
    """Send one request and fill its record; cancellation marks it incomplete."""
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
    body = request_body(spec, prompt_text)
    sent = time.perf_counter()
    record.sent_s = sent - t0
    try:
        for attempt, session in enumerate((sessions.pooled, sessions.fresh)):
            try:
                await _stream(session, spec, body, headers, record, sent)
                break
            except _RetryableBeforeResponse as exc:
                # A pooled keep-alive connection the server had already closed: the request was
                # never received, so resending it on a fresh connection is safe. The clock
                # restarts: nothing was measured.
                if attempt == 1:
                    record.status, record.error, record.error_detail = ERROR, "connection", str(exc)
                    break
                record.retries += 1
                sent = time.perf_counter()
                record.sent_s = sent - t0
    except asyncio.CancelledError:
        # Cut off by the time cap: never completed, never an error. e2e_s is the time until
        # the cut, so the run's duration covers the grace period it waited.
        record.status = INCOMPLETE
        record.e2e_s = time.perf_counter() - sent
        raise
    except TimeoutError:
        record.status, record.error = ERROR, "timeout"
    except aiohttp.ClientError as exc:
        record.status, record.error = ERROR, "connection"
        record.error_detail = f"{type(exc).__name__}: {exc}"[:500]
    record.e2e_s = time.perf_counter() - sent


class _Progress:
    """A one-line live progress display on a terminal; silent otherwise (CI logs)."""

    def __init__(self, total: int, enabled: bool | None = None) -> None:
        self.total = total
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.done = self.errors = self.tokens = 0
        self.start = time.perf_counter()

    def update(self, record: RequestRecord) -> None:
        self.done += 1
        self.errors += record.status == ERROR
        self.tokens += record.completion_tokens or 0

    async def run(self) -> None:
        while self.enabled:
            self.draw()
            await asyncio.sleep(0.5)

    def draw(self, end: str = "") -> None:
        if not self.enabled:
            return
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
            f"errors {self.errors}  {self.tokens / elapsed:8.1f} tok/s{end}"
        )
        sys.stderr.flush()


async def _warmup(sessions: Sessions, spec: LoadSpec, t0: float) -> list:
    records = [
        RequestRecord(index=-1 - i, prompt_index=-1, warmup=True)
        for i in range(spec.warmup_requests)
    ]
    await asyncio.gather(*(run_request(sessions, spec, WARMUP_PROMPT, r, t0) for r in records))
    return records


async def run_load_async(
    spec: LoadSpec,
    prompts: list[Prompt],
    progress: bool | None = None,
    on_measure_start: Callable[[], None] | None = None,
) -> LoadResult:
    """Warm up, call `on_measure_start` (phase switch, counter snapshot), then the measured run."""
    if spec.concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    started_at = time.time()
    sessions = Sessions.open(spec)
    try:
        t_warm = time.perf_counter()
        warm = await _warmup(sessions, spec, t_warm) if spec.warmup_requests else []
        if on_measure_start is not None:
            await asyncio.get_running_loop().run_in_executor(None, on_measure_start)
        t0 = time.perf_counter()
        deadline = t0 + spec.max_seconds if spec.max_seconds else None
        arrivals = _arrival_offsets(len(prompts), spec.request_rate, spec.arrival_seed)
        pending = iter(enumerate(prompts))
        records: list[RequestRecord] = []
        state = {"capped": False}
        bar = _Progress(len(prompts), progress)

        async def worker() -> None:
            for position, prompt in pending:
                if arrivals is not None:
                    delay = t0 + arrivals[position] - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if deadline is not None and time.perf_counter() >= deadline:
                    state["capped"] = True
                    return
                record = RequestRecord(index=position, prompt_index=prompt.index)
                records.append(record)
                await run_request(sessions, spec, prompt.text, record, t0)
                bar.update(record)

        bar_task = asyncio.create_task(bar.run())
        workers = [asyncio.create_task(worker()) for _ in range(spec.concurrency)]
        limit = None if deadline is None else deadline + spec.grace_s - time.perf_counter()
        _, still_running = await asyncio.wait(workers, timeout=limit)
        for task in still_running:
            task.cancel()
        if still_running:
            state["capped"] = True
            await asyncio.gather(*still_running, return_exceptions=True)
        bar_task.cancel()
        bar.draw(end="\n")
    finally:
        await sessions.close()
    records.sort(key=lambda r: r.index)
    not_started = len(prompts) - len(records)
    return LoadResult(
        warm + records, state["capped"] or not_started > 0, not_started, started_at, time.time()
    )


def _arrival_offsets(count: int, rate: float | None, seed: int) -> list[float] | None:
    """Poisson arrivals: exponential gaps with mean 1/rate, seeded; None for a closed loop."""
    if not rate:
        return None
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for _ in range(count):
        offsets.append(t)
        t += rng.expovariate(rate)
    return offsets


def run_load(
    spec: LoadSpec,
    prompts: list[Prompt],
    progress: bool | None = None,
    on_measure_start: Callable[[], None] | None = None,
) -> LoadResult:
    return asyncio.run(run_load_async(spec, prompts, progress, on_measure_start))
