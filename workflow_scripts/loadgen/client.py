"""The load's entry point: warm-up kept apart, the measure-start hook, the measured part, the
measure-end hook, one raw record per request. The measured part runs in this process
(closed_loop) or, with `processes > 1`, fanned out over that many processes sharing one prompt
queue and one clock (fan_out); unset, the count follows the expected chunk rate
(loadgen.processes)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .closed_loop import InProcess
from .fan_out import FanOut
from .processes import ProcessChoice, choose_processes
from .progress import Progress
from .prompts import Prompt
from .records import RequestRecord
from .request import Link, request_body, run_request
from .settings import LoadSettings
from .wire import Endpoint

__all__ = ["LoadResult", "LoadSettings", "RunOptions", "run_load", "run_load_async"]

WARMUP_PROMPT = "Write a short paragraph about the sea."


@dataclass
class LoadResult:
    """What a load returns: the warm-up records then the measured ones by position, whether the
    cap cut the run short, its wall and monotonic clocks, and with conversations the turns each
    was planned to send, by session (what metrics count sent and unsent turns against)."""

    records: list[RequestRecord]
    hit_time_cap: bool
    not_started: int
    started_at: float
    finished_at: float
    clock_origin_s: float = 0.0  # time.perf_counter() (CLOCK_MONOTONIC) at the measured start
    epoch_origin_s: float = 0.0  # time.time() at the same instant: records' `sent_s` zero
    processes: ProcessChoice | None = None
    planned_turns: list[int] | None = None  # None: no conversations


@dataclass(frozen=True)
class RunOptions:
    """What the caller sees of a load, none of it sent to the server: `progress` (None: a bar
    when stderr is a terminal) or labelled lines with `progress_label` (see `Progress`), and the
    hooks called at the measured part's start (phase switch, counter snapshot) and end (before
    any load process is reaped, so each one's CPU time can still be read)."""

    progress: bool | None = None
    progress_label: str | None = None
    on_measure_start: Callable[[], None] | None = None
    on_measure_end: Callable[[], None] | None = None


class MeasuredPart(Protocol):
    """One way to run the measured part (closed_loop.InProcess, fan_out.FanOut): `start` before
    the warm-up, `ready` after it, `run` from the start time, `close` after the end hook, then
    `outcome`: the records and whether the cap was hit."""

    poll: Callable[[], tuple[int, int, int]] | None

    def start(self) -> None: ...

    async def ready(self) -> None: ...

    async def run(self, t0: float, on_record: Callable[[RequestRecord], None]) -> None: ...

    def close(self) -> None: ...

    def outcome(self) -> tuple[list[RequestRecord], bool]: ...


async def _warmup(spec: LoadSettings, endpoint: Endpoint) -> list[RequestRecord]:
    records = [
        RequestRecord(index=-1 - i, prompt_index=-1, warmup=True)
        for i in range(spec.warmup_requests)
    ]
    request = endpoint.request(spec.path, request_body(spec, WARMUP_PROMPT), spec.api_key)
    t0 = time.perf_counter()

    async def one(record: RequestRecord) -> None:
        link = Link(endpoint)
        try:
            await run_request(link, spec, request, record, t0)
        finally:
            link.drop()

    tasks = [asyncio.ensure_future(one(r)) for r in records]
    # the time cap bounds the warm-up too: a server that stalls on it is cut at max_seconds
    # (+ grace_s), its warm-up requests stay incomplete, and the measured part runs as usual
    cap_s = spec.max_seconds + spec.grace_s if spec.max_seconds else None
    _, stalled = await asyncio.wait(tasks, timeout=cap_s)
    for task in stalled:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()
    return records


async def _measure(
    spec: LoadSettings, prompts: list[Prompt], options: RunOptions, part: MeasuredPart
) -> LoadResult:
    """The one order of a load, whichever way its measured part runs: warm up, the start hook,
    the measured part from `t0` (taken right before it), the end hook before the part is closed
    (an ended load process stays readable, a zombie, until reaped), the last progress line."""
    loop = asyncio.get_running_loop()
    started_at = time.time()
    try:
        part.start()
        endpoint = Endpoint.from_base_url(spec.base_url)
        warm = await _warmup(spec, endpoint) if spec.warmup_requests else []
        await part.ready()
        if options.on_measure_start is not None:
            await loop.run_in_executor(None, options.on_measure_start)
        bar = Progress(sum(p.requests for p in prompts), options.progress, options.progress_label)
        bar.poll = part.poll
        bar_task = asyncio.create_task(bar.run())
        t0, t0_epoch_s = time.perf_counter(), time.time()
        try:
            await part.run(t0, bar.update)
        finally:
            bar_task.cancel()
        if options.on_measure_end is not None:
            await loop.run_in_executor(None, options.on_measure_end)
        bar.draw(end="\n")
    finally:
        part.close()
    records, capped = part.outcome()
    records.sort(key=lambda r: r.index)
    started = {r.index if r.session is None else ("session", r.session) for r in records}
    not_started = len(prompts) - len(started)
    talks = any(p.conversation is not None for p in prompts)
    return LoadResult(
        warm + records,
        capped or not_started > 0,
        not_started,
        started_at,
        time.time(),
        t0,
        t0_epoch_s,
        planned_turns=[p.requests for p in prompts] if talks else None,
    )


async def run_load_async(
    spec: LoadSettings, prompts: list[Prompt], options: RunOptions = RunOptions()
) -> LoadResult:
    if spec.concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    choice = choose_processes(spec.concurrency, spec.processes)
    if choice.processes > 1 and spec.concurrency > 1:
        result = await _measure(spec, prompts, options, FanOut(spec, prompts, choice.processes))
        result.processes = choice
        return result
    result = await _measure(spec, prompts, options, InProcess(spec, prompts))
    result.processes = ProcessChoice(1, choice.source, choice.expected_chunks_per_s, choice.cores)
    return result


def run_load(
    spec: LoadSettings, prompts: list[Prompt], options: RunOptions = RunOptions()
) -> LoadResult:
    return asyncio.run(run_load_async(spec, prompts, options))
