"""The measured run inside one event loop: closed-loop workers (optionally Poisson-paced) under
the time cap and its grace, the piece both the in-process and every load process run."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from .prompts import Prompt
from .records import RequestRecord
from .request import Link, prompt_sha256, request_body, run_request
from .sessions import MeasuredRun, converse
from .settings import LoadSettings
from .wire import Endpoint


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


def schedule(prompts: list[Prompt], spec: LoadSettings) -> list[float] | None:
    """Each position's planned send time from the run's start: a trace's own (its prompts'
    `at_s`), else Poisson arrivals at `request_rate`, else None (a closed loop)."""
    if prompts and prompts[0].at_s is not None:
        return [p.at_s for p in prompts]
    return _arrival_offsets(len(prompts), spec.request_rate, spec.arrival_seed)


@dataclass(frozen=True)
class PromptQueue:
    """What a run's workers take their prompts from: the prompts by position, each position's
    planned send time from the run's start (`arrivals`; None: a closed loop) and first record
    index (`firsts`: a conversation's turns number on), and the call that gives the next
    position to send (None: none left)."""

    prompts: list[Prompt]
    arrivals: list[float] | None
    firsts: list[int]
    next_position: Callable[[], int | None]

    def scheduled_s(self, position: int) -> float | None:
        return self.arrivals[position] if self.arrivals is not None else None


def first_indices(prompts: list[Prompt]) -> list[int]:
    """Each position's first record index: one record a request, a conversation's turns on."""
    firsts = [0]
    for prompt in prompts[:-1]:
        firsts.append(firsts[-1] + prompt.requests)
    return firsts


async def on_time(run: MeasuredRun, scheduled_s: float | None) -> bool:
    """Wait for a position's planned send time (`scheduled_s` from the run's start; None: send
    now); False when the time cap comes first: the planned time at or past it, or now past it."""
    if scheduled_s is not None:
        at = run.t0 + scheduled_s
        if run.deadline is not None and at >= run.deadline:
            return False
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
    return not run.past_cap()


async def send_one(
    run: MeasuredRun, link: Link, prompt: Prompt, position: int, scheduled_s: float | None
) -> None:
    """Prompt `prompt`'s one request as record `position`, its record appended when it starts
    and handed to `run.on_record` once it has ended."""
    spec = run.spec
    record = RequestRecord(index=position, prompt_index=prompt.index)
    if scheduled_s is not None:
        record.scheduled_s = scheduled_s
    run.records.append(record)
    body = request_body(spec, prompt.text, max_tokens=prompt.max_tokens)
    record.prompt_sha256 = prompt_sha256(body)
    request = run.endpoint.request(spec.path, body, spec.api_key)
    await run_request(link, spec, request, record, run.t0)
    run.on_record(record)


async def worker(run: MeasuredRun, queue: PromptQueue) -> bool:
    """One closed-loop worker on one connection: the next position's prompt, sent when due (a
    conversation as one session), until none is left; True when the time cap stopped it."""
    link = Link(run.endpoint)
    try:
        while (position := queue.next_position()) is not None:
            prompt, scheduled_s = queue.prompts[position], queue.scheduled_s(position)
            if not await on_time(run, scheduled_s):
                return True
            if prompt.conversation is None:
                await send_one(run, link, prompt, position, scheduled_s)
            elif not await converse(
                run, link, prompt, position, queue.firsts[position], scheduled_s
            ):
                return True
        return False
    finally:
        link.drop()


async def measured(
    spec: LoadSettings,
    prompts: list[Prompt],
    t0: float,
    workers: int,
    next_position: Callable[[], int | None],
    on_record: Callable[[RequestRecord], None],
) -> tuple[list[RequestRecord], bool]:
    """`workers` closed-loop workers taking prompt positions from `next_position` until none is
    left or the cap is reached; in-flight requests are cancelled `grace_s` after the cap."""
    deadline = t0 + spec.max_seconds if spec.max_seconds else None
    records: list[RequestRecord] = []
    run = MeasuredRun(spec, Endpoint.from_base_url(spec.base_url), t0, deadline, records, on_record)
    queue = PromptQueue(prompts, schedule(prompts, spec), first_indices(prompts), next_position)
    tasks = [asyncio.create_task(worker(run, queue)) for _ in range(workers)]
    limit = None if deadline is None else max(0.0, deadline + spec.grace_s - time.perf_counter())
    _, running = await asyncio.wait(tasks, timeout=limit)
    for task in running:
        task.cancel()
    if running:
        await asyncio.gather(*running, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()
    capped = bool(running) or any(task.result() for task in tasks if not task.cancelled())
    return records, capped


class InProcess:
    """The measured part on this process's event loop: `spec.concurrency` workers over one
    iterator of prompt positions, each record counted by the progress as it ends."""

    poll = None  # the progress counts this process's records itself

    def __init__(self, spec: LoadSettings, prompts: list[Prompt]) -> None:
        self.settings, self.prompts = spec, prompts
        self.records: list[RequestRecord] = []
        self.capped = False

    def start(self) -> None:
        pass

    async def ready(self) -> None:
        pass

    async def run(self, t0: float, on_record: Callable[[RequestRecord], None]) -> None:
        positions = iter(range(len(self.prompts)))
        self.records, self.capped = await measured(
            self.settings,
            self.prompts,
            t0,
            self.settings.concurrency,
            lambda: next(positions, None),
            on_record,
        )

    def close(self) -> None:
        pass

    def outcome(self) -> tuple[list[RequestRecord], bool]:
        return self.records, self.capped
