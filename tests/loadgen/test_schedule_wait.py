"""Latency from when a request was due, checked in closed form through the REAL load client.

A STAND-IN server (tests/conftest.py `standin`) answers every request in a constant time: its
first token FIRST_S after the request arrives, its last SERVICE_S after. The client sends on a
schedule (a trace's evenly spaced timestamps, or seeded Poisson arrivals the test recomputes)
faster than its concurrency cap can serve: CAP workers, each request SERVICE_S, so CAP /
SERVICE_S = 10 requests/s against 20 due. A request waits for a free worker, so with constant
service the workers free up in order and request i is sent at

    start_i = max(scheduled_i, end_{i - CAP})        (scheduled_i for the first CAP)
    end_i   = start_i + SERVICE_S

and its E2E from the schedule is end_i - scheduled_i, its TTFT from the schedule start_i -
scheduled_i + FIRST_S. From the send both stay at SERVICE_S and FIRST_S whatever the wait.

Tolerance: what the closed form leaves out is each request's overhead (loopback HTTP, the
stand-in's and the client's event loops), measured here as each record's E2E from its send less
SERVICE_S; a request's figure rests on the chain of services before it (i // CAP + 1 of them), so
it may run late by that many times (the largest overhead measured + 5 ms of timer and hand-over
slack), and never early by more than 1 ms (no sleep ends early, nothing is sent before it is
due). The law stand-in (fixtures/sweeps/law_server.py) is not used: with two requests in it a
request that arrives mid-step joins that step, so its service time varies by up to a step."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.closed_loop import _arrival_offsets
from workflow_scripts.loadgen.metrics import (
    compute_metrics,
    e2el_from_schedule_s,
    percentile,
    ttft_from_schedule_s,
)
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.loadgen.records import OK

pytestmark = pytest.mark.standin

FIRST_S, SERVICE_S = 0.05, 0.2
CAP, COUNT = 2, 12
RATE = 20.0  # requests due per second: twice what CAP workers of SERVICE_S serve
SLACK_S = 0.005
SEED = 3  # its draw queues the last requests: the largest wait 0.7 s


def constant_service(standin):
    """Stand-in: one token FIRST_S after the request, a second at SERVICE_S, then the end."""

    async def handler(reader, writer):
        while True:
            await standin.read_request(reader)
            writer.write(standin.sse_head())
            await asyncio.sleep(FIRST_S)
            writer.write(standin.event(standin.content("tok")))
            await writer.drain()
            await asyncio.sleep(SERVICE_S - FIRST_S)
            writer.write(
                standin.event(standin.content("en"))
                + standin.event(standin.usage(2, 2))
                + standin.event(b"[DONE]")
                + standin.chunk(b"")
            )
            await writer.drain()

    return handler


def queued_starts(scheduled: list[float], cap: int, service_s: float) -> list[float]:
    """start_i = max(scheduled_i, end_{i - cap}): when each request is sent."""
    starts: list[float] = []
    for i, due in enumerate(scheduled):
        starts.append(due if i < cap else max(due, starts[i - cap] + service_s))
    return starts


@pytest.mark.parametrize("arrivals", ["trace", "poisson"])
def test_latency_from_the_schedule_is_the_closed_form_queueing_delay(standin, arrivals):
    url = standin.start(constant_service(standin))
    settings = LoadSettings(
        base_url=url, concurrency=CAP, max_tokens=2, warmup_requests=0, processes=1
    )
    if arrivals == "trace":  # a replayed trace: evenly spaced timestamps
        scheduled = [i / RATE for i in range(COUNT)]
        prompts = [Prompt(i, f"prompt {i}", at_s=at) for i, at in enumerate(scheduled)]
    else:  # Poisson arrivals, seeded: the schedule the client draws, recomputed
        settings = dataclasses.replace(settings, request_rate=RATE, arrival_seed=SEED)
        scheduled = _arrival_offsets(COUNT, RATE, SEED)
        prompts = [Prompt(i, f"prompt {i}") for i in range(COUNT)]
    load = run_load(settings, prompts, RunOptions(progress=False))
    records = sorted(load.records, key=lambda r: r.index)
    assert [r.status for r in records] == [OK] * COUNT
    assert [r.scheduled_s for r in records] == scheduled

    starts = queued_starts(scheduled, CAP, SERVICE_S)
    overhead_s = max(r.e2e_s - SERVICE_S for r in records)
    print(f"{arrivals}: overhead per request at most {1000 * overhead_s:.1f} ms")
    assert 0 <= overhead_s < 0.05  # a request took its service time, give or take a little
    off_ms = [
        1000 * (e2el_from_schedule_s(r) - (starts[i] + SERVICE_S - scheduled[i]))
        for i, r in enumerate(records)
    ]
    print(
        f"{arrivals}: from-schedule E2E minus the closed form "
        f"{min(off_ms):.1f}..{max(off_ms):.1f} ms"
    )
    for i, record in enumerate(records):
        late_by = (i // CAP + 1) * (overhead_s + SLACK_S)
        expected_e2e = starts[i] + SERVICE_S - scheduled[i]
        expected_ttft = starts[i] + FIRST_S - scheduled[i]
        assert expected_e2e - 0.001 <= e2el_from_schedule_s(record) <= expected_e2e + late_by
        assert expected_ttft - 0.001 <= ttft_from_schedule_s(record) <= expected_ttft + late_by

    # what metrics.json says: the wait counted from the schedule, left out from the send
    metrics = compute_metrics(load.records)
    expected = sorted(1000 * (s + SERVICE_S - d) for s, d in zip(starts, scheduled, strict=True))
    late_ms = 1000 * (COUNT // CAP) * (overhead_s + SLACK_S)
    for name in ("median", "p99"):
        value = metrics["e2el_from_schedule_ms"][name]
        target = percentile(expected, 50 if name == "median" else 99)
        assert target - 1 <= value <= target + late_ms
    assert expected[-1] > 3 * 1000 * SERVICE_S  # a request waited twice its service or more
    assert metrics["e2el_ms"]["p99"] < 1000 * (SERVICE_S + overhead_s) + 1
    assert metrics["send_lag_check"]["flagged"] is True
