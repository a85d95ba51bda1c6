"""The load: a closed loop of `concurrency` workers (optionally Poisson-paced), a hard time cap
with grace and cancellation, warmup kept apart, and one raw record per request. With
`processes > 1` the workers are spread over that many processes sharing one prompt queue and
one clock, and their records are merged as if one process had run them; unset, the count
follows the expected chunk rate (loadgen.processes)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..terminal import Throttle, say
from .datasets import Prompt
from .processes import ProcessChoice, choose_processes
from .records import ERROR, INCOMPLETE, OK, RequestRecord
from .wire import Connection, Endpoint

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
    processes: int | None = None  # None: chosen from the expected chunk rate
    api_key: str | None = field(default=None, repr=False)
    extra_body: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"

    @property
    def url(self) -> str:
        ep = Endpoint.from_base_url(self.base_url)
        return f"{ep.scheme}://{ep.host_header}{ep.prefix}{self.path}"

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
    clock_origin_s: float = 0.0  # time.perf_counter() (CLOCK_MONOTONIC) at the measured start
    processes: ProcessChoice | None = None


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


class _Link:
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
    link: _Link, spec: LoadSpec, request: bytes, record: RequestRecord, t0: float
) -> None:
    """Send one request and fill its record; a cancellation (time cap) marks it incomplete."""
    sent = time.perf_counter()
    record.sent_s = sent - t0
    reader = None
    try:
        async with asyncio.timeout(spec.request_timeout_s):
            for attempt in range(2):
                conn, reused = await link.get()
                reader = await conn.exchange(request, record, sent)
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


class _Progress:
    """Live progress: a one-line bar on a terminal (silent otherwise, e.g. CI logs), or, with a
    `label`, a plain line every `every_s` seconds for the terminal that runs snakemake (the rule
    script's own stderr goes to its log)."""

    def __init__(
        self, total: int, enabled: bool | None = None, label: str | None = None, every_s=5.0
    ) -> None:
        self.total = total
        self.label = label
        self.enabled = label is not None or (sys.stderr.isatty() if enabled is None else enabled)
        self.throttle = Throttle(every_s)
        self.done = self.errors = self.tokens = 0
        self.start = time.perf_counter()
        self.poll: Callable[[], tuple[int, int, int]] | None = None

    def update(self, record: RequestRecord) -> None:
        self.done += 1
        self.errors += record.status == ERROR
        self.tokens += record.completion_tokens or 0

    async def run(self) -> None:
        while self.enabled:
            if self.label is None or self.throttle.ready():
                self.draw()
            await asyncio.sleep(0.5)

    def draw(self, end: str = "") -> None:
        if not self.enabled:
            return
        if self.poll is not None:
            self.done, self.errors, self.tokens = self.poll()
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        if self.label is not None:
            say(
                f"{self.label}: {self.done}/{self.total} requests, {self.errors} errors, "
                f"{self.tokens / elapsed:.1f} decode tok/s so far"
            )
            return
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
            f"errors {self.errors}  {self.tokens / elapsed:8.1f} tok/s{end}"
        )
        sys.stderr.flush()


async def _warmup(spec: LoadSpec, endpoint: Endpoint) -> list[RequestRecord]:
    records = [
        RequestRecord(index=-1 - i, prompt_index=-1, warmup=True)
        for i in range(spec.warmup_requests)
    ]
    request = endpoint.request(spec.path, request_body(spec, WARMUP_PROMPT), spec.api_key)
    t0 = time.perf_counter()

    async def one(record: RequestRecord) -> None:
        link = _Link(endpoint)
        try:
            await run_request(link, spec, request, record, t0)
        finally:
            link.drop()

    await asyncio.gather(*(one(r) for r in records))
    return records


async def _measured(
    spec: LoadSpec,
    prompts: list[Prompt],
    t0: float,
    workers: int,
    next_position: Callable[[], int | None],
    on_record: Callable[[RequestRecord], None],
) -> tuple[list[RequestRecord], bool]:
    """`workers` closed-loop workers taking prompt positions from `next_position` until none is
    left or the cap is reached; in-flight requests are cancelled `grace_s` after the cap."""
    endpoint = Endpoint.from_base_url(spec.base_url)
    deadline = t0 + spec.max_seconds if spec.max_seconds else None
    arrivals = _arrival_offsets(len(prompts), spec.request_rate, spec.arrival_seed)
    records: list[RequestRecord] = []
    capped = False

    async def worker() -> None:
        nonlocal capped
        link = _Link(endpoint)
        try:
            while (position := next_position()) is not None:
                if arrivals is not None:
                    at = t0 + arrivals[position]
                    if deadline is not None and at >= deadline:
                        capped = True
                        return
                    delay = at - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if deadline is not None and time.perf_counter() >= deadline:
                    capped = True
                    return
                prompt = prompts[position]
                record = RequestRecord(index=position, prompt_index=prompt.index)
                records.append(record)
                body = request_body(spec, prompt.text)
                await run_request(
                    link, spec, endpoint.request(spec.path, body, spec.api_key), record, t0
                )
                on_record(record)
        finally:
            link.drop()

    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    limit = None if deadline is None else max(0.0, deadline + spec.grace_s - time.perf_counter())
    _, running = await asyncio.wait(tasks, timeout=limit)
    for task in running:
        task.cancel()
    if running:
        capped = True
        await asyncio.gather(*running, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()
    return records, capped


async def run_load_async(
    spec: LoadSpec,
    prompts: list[Prompt],
    progress: bool | None = None,
    on_measure_start: Callable[[], None] | None = None,
    progress_label: str | None = None,
    on_measure_end: Callable[[], None] | None = None,
) -> LoadResult:
    """Warm up, call `on_measure_start` (phase switch, counter snapshot), then the measured run,
    then `on_measure_end` before any load process is reaped (so each one's CPU time is read).
    `progress_label`: report progress as labelled lines (see `_Progress`)."""
    if spec.concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    choice = choose_processes(spec.concurrency, spec.processes)
    if choice.processes > 1 and spec.concurrency > 1:
        result = await _run_processes(
            spec,
            choice.processes,
            prompts,
            progress,
            on_measure_start,
            progress_label,
            on_measure_end,
        )
        result.processes = choice
        return result
    started_at = time.time()
    endpoint = Endpoint.from_base_url(spec.base_url)
    warm = await _warmup(spec, endpoint) if spec.warmup_requests else []
    if on_measure_start is not None:
        await asyncio.get_running_loop().run_in_executor(None, on_measure_start)
    positions = iter(range(len(prompts)))
    bar = _Progress(len(prompts), progress, progress_label)
    bar_task = asyncio.create_task(bar.run())
    t0 = time.perf_counter()
    try:
        records, capped = await _measured(
            spec, prompts, t0, spec.concurrency, lambda: next(positions, None), bar.update
        )
    finally:
        bar_task.cancel()
    if on_measure_end is not None:
        on_measure_end()
    bar.draw(end="\n")
    result = _result(warm, records, capped, len(prompts), started_at, t0)
    result.processes = ProcessChoice(1, choice.source, choice.expected_chunks_per_s, choice.cores)
    return result


def _result(warm, records, capped, total, started_at, t0) -> LoadResult:
    records.sort(key=lambda r: r.index)
    not_started = total - len(records)
    return LoadResult(
        warm + records, capped or not_started > 0, not_started, started_at, time.time(), t0
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


def split_workers(concurrency: int, processes: int) -> list[int]:
    """Workers per process: as even as possible, none empty."""
    processes = max(1, min(processes, concurrency))
    base, extra = divmod(concurrency, processes)
    return [base + (i < extra) for i in range(processes)]


def _child(pipe, spec: LoadSpec, prompts: list[Prompt], counter, tally, workers: int) -> None:
    """One worker process: wait for the shared start time, run its workers, send the records."""
    try:
        pipe.send("ready")
        t0 = pipe.recv()
        if t0 is None:
            return

        def next_position() -> int | None:
            with counter.get_lock():
                position = counter.value
                if position >= len(prompts):
                    return None
                counter.value = position + 1
            return position

        def on_record(record: RequestRecord) -> None:
            with tally.get_lock():
                tally[0] += 1
                tally[1] += record.status == ERROR
                tally[2] += record.completion_tokens or 0

        records, capped = asyncio.run(
            _measured(spec, prompts, t0, workers, next_position, on_record)
        )
        pipe.send(("ok", records, capped))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):
        pass  # interrupted, or the parent gave up before the start: nothing to report
    except BaseException:
        with contextlib.suppress(OSError):
            pipe.send(("error", traceback.format_exc(), False))
    finally:
        pipe.close()


async def _run_processes(
    spec: LoadSpec,
    processes: int,
    prompts: list[Prompt],
    progress: bool | None,
    on_measure_start: Callable[[], None] | None,
    progress_label: str | None = None,
    on_measure_end: Callable[[], None] | None = None,
) -> LoadResult:
    """The same load from several processes: one shared position counter (so it is still one
    closed loop over the prompts), one start time on the shared monotonic clock, one deadline."""
    ctx = multiprocessing.get_context("spawn")
    counter = ctx.Value("q", 0)
    tally = ctx.Array("q", 3)
    loop = asyncio.get_running_loop()
    started_at = time.time()
    procs, pipes = [], []
    try:
        for workers in split_workers(spec.concurrency, processes):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=_child, args=(theirs, spec, prompts, counter, tally, workers), daemon=True
            )
            proc.start()
            theirs.close()
            procs.append(proc)
            pipes.append(mine)
        endpoint = Endpoint.from_base_url(spec.base_url)
        warm = await _warmup(spec, endpoint) if spec.warmup_requests else []
        await loop.run_in_executor(None, lambda: [p.recv() for p in pipes])
        if on_measure_start is not None:
            await loop.run_in_executor(None, on_measure_start)
        bar = _Progress(len(prompts), progress, progress_label)
        bar.poll = lambda: tuple(tally[:])
        bar_task = asyncio.create_task(bar.run())
        t0 = time.perf_counter()
        for pipe in pipes:
            pipe.send(t0)
        try:
            answers = await loop.run_in_executor(None, lambda: [p.recv() for p in pipes])
        finally:
            bar_task.cancel()
        if on_measure_end is not None:  # before the joins: an ended worker stays readable
            await loop.run_in_executor(None, on_measure_end)  # (a zombie) until reaped
        bar.draw(end="\n")
    finally:
        for pipe in pipes:
            pipe.close()
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join()
    records: list[RequestRecord] = []
    capped = False
    for kind, payload, child_capped in answers:
        if kind == "error":
            raise RuntimeError(f"a load process failed:\n{payload}")
        records += payload
        capped = capped or child_capped
    return _result(warm, records, capped, len(prompts), started_at, t0)


def run_load(
    spec: LoadSpec,
    prompts: list[Prompt],
    progress: bool | None = None,
    on_measure_start: Callable[[], None] | None = None,
    progress_label: str | None = None,
    on_measure_end: Callable[[], None] | None = None,
) -> LoadResult:
    return asyncio.run(
        run_load_async(spec, prompts, progress, on_measure_start, progress_label, on_measure_end)
    )
