"""The measured run inside one event loop: closed-loop workers (optionally Poisson-paced) under
the time cap and its grace, the piece both the in-process and every load process run."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

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
    endpoint = Endpoint.from_base_url(spec.base_url)
    deadline = t0 + spec.max_seconds if spec.max_seconds else None
    arrivals = schedule(prompts, spec)
    records: list[RequestRecord] = []
    capped = False
    firsts = [0]  # each position's first record index: a conversation's turns number on
    for prompt in prompts[:-1]:
        firsts.append(firsts[-1] + prompt.requests)

    run = MeasuredRun(spec, endpoint, t0, deadline, records, on_record)

    async def worker() -> None:
        nonlocal capped
        link = Link(endpoint)
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
                if prompts[position].conversation is not None:
                    scheduled_s = arrivals[position] if arrivals is not None else None
                    if not await converse(
                        run, link, prompts[position], position, firsts[position], scheduled_s
                    ):
                        capped = True
                        return
                    continue
                prompt = prompts[position]
                record = RequestRecord(index=position, prompt_index=prompt.index)
                if arrivals is not None:
                    record.scheduled_s = arrivals[position]
                records.append(record)
                body = request_body(spec, prompt.text, max_tokens=prompt.max_tokens)
                record.prompt_sha256 = prompt_sha256(body)
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
