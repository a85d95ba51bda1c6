"""The time cap: after `max_seconds` no request starts; in-flight ones get `grace_s`, then are
cancelled and counted incomplete (never completed, never errors). Stand-in servers stream slowly
on purpose, which no real engine does on demand."""

from __future__ import annotations

import asyncio
import time

import pytest

from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.closed_loop import _arrival_offsets
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.loadgen.records import INCOMPLETE, OK

pytestmark = pytest.mark.standin

PROMPTS = [Prompt(i, f"prompt {i}") for i in range(6)]


def slow_stream_handler(standin, chunks: int, gap_s: float):
    """Stand-in: every answer is `chunks` tokens, one every `gap_s` seconds."""

    async def handler(reader, writer):
        while True:
            await standin.read_request(reader)
            writer.write(standin.sse_head())
            for _ in range(chunks):
                writer.write(standin.event(standin.content("tok")))
                await writer.drain()
                await asyncio.sleep(gap_s)
            writer.write(
                standin.event(standin.usage(2, chunks))
                + standin.event(b"[DONE]")
                + standin.chunk(b"")
            )
            await writer.drain()

    return handler


def test_in_flight_requests_are_cancelled_after_grace_and_counted_incomplete(standin):
    url = standin.start(slow_stream_handler(standin, chunks=10_000, gap_s=0.02))
    spec = LoadSettings(
        base_url=url, concurrency=2, max_tokens=8, warmup_requests=0, max_seconds=0.3, grace_s=0.3
    )
    begun = time.perf_counter()
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    wall_s = time.perf_counter() - begun
    # bounded: the cap plus grace plus setup, far from the 200 s the streams would take
    assert wall_s < spec.max_seconds + spec.grace_s + 5
    metrics = compute_metrics(load.records, hit_time_cap=load.hit_time_cap)
    assert load.hit_time_cap and metrics["hit_time_cap"]
    assert [r.status for r in load.records] == [INCOMPLETE, INCOMPLETE]
    assert all(r.chunk_times_s for r in load.records)  # they were streaming when cut
    assert (metrics["completed"], metrics["errors"], metrics["incomplete"]) == (0, 0, 2)
    assert load.not_started == len(PROMPTS) - 2
    # cut at cap + grace, and the run's duration covers the wait
    assert all(r.sent_s + r.e2e_s >= spec.max_seconds + spec.grace_s for r in load.records)
    assert metrics["duration_s"] >= spec.max_seconds + spec.grace_s


def test_requests_that_finish_within_grace_are_completed(standin):
    url = standin.start(slow_stream_handler(standin, chunks=10, gap_s=0.03))  # ~0.3 s answers
    spec = LoadSettings(
        base_url=url, concurrency=2, max_tokens=8, warmup_requests=0, max_seconds=0.1, grace_s=20
    )
    begun = time.perf_counter()
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    assert time.perf_counter() - begun < 10  # no waiting out the grace once all are done
    metrics = compute_metrics(load.records, hit_time_cap=load.hit_time_cap)
    assert [r.status for r in load.records] == [OK, OK]
    assert (metrics["completed"], metrics["incomplete"], metrics["errors"]) == (2, 0, 0)
    assert metrics["completion_tokens"] == 20
    assert load.hit_time_cap and load.not_started == len(PROMPTS) - 2


def test_no_cap_means_every_prompt_runs(standin):
    url = standin.start(slow_stream_handler(standin, chunks=3, gap_s=0.001))
    load = run_load(
        LoadSettings(base_url=url, concurrency=3, max_tokens=8, warmup_requests=2),
        PROMPTS,
        RunOptions(progress=False),
    )
    metrics = compute_metrics(load.records, hit_time_cap=load.hit_time_cap)
    assert not load.hit_time_cap and load.not_started == 0
    assert metrics["completed"] == len(PROMPTS)
    assert metrics["send_lag_ms"] is None and all(r.scheduled_s is None for r in load.records)
    assert sorted(r.prompt_index for r in load.records if not r.warmup) == list(range(6))
    assert [r.index for r in load.records if r.warmup] == [-1, -2]


def test_poisson_arrivals_are_seeded_and_never_early(standin):
    offsets = _arrival_offsets(2000, rate=50.0, seed=7)
    assert offsets == _arrival_offsets(2000, rate=50.0, seed=7)
    assert offsets != _arrival_offsets(2000, rate=50.0, seed=8)
    gaps = [b - a for a, b in zip(offsets, offsets[1:], strict=False)]
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 50.0, rel=0.1)
    url = standin.start(slow_stream_handler(standin, chunks=2, gap_s=0.001))
    spec = LoadSettings(
        base_url=url,
        concurrency=6,
        max_tokens=8,
        warmup_requests=0,
        request_rate=20.0,
        arrival_seed=3,
    )
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    planned = _arrival_offsets(len(PROMPTS), 20.0, 3)
    assert all(r.status == OK for r in load.records)
    assert [r.scheduled_s for r in load.records] == planned  # each record keeps its plan
    assert all(r.sent_s >= planned[r.index] for r in load.records)
    lag = compute_metrics(load.records)["send_lag_ms"]
    assert 0 <= lag["p50"] <= lag["p99"] < 1000  # sent when planned, not a second late


def test_arrivals_after_the_cap_are_not_started(standin):
    url = standin.start(slow_stream_handler(standin, chunks=2, gap_s=0.001))
    spec = LoadSettings(
        base_url=url,
        concurrency=6,
        max_tokens=8,
        warmup_requests=0,
        request_rate=0.5,
        arrival_seed=1,
        max_seconds=0.5,
        grace_s=1,
    )
    planned = _arrival_offsets(len(PROMPTS), 0.5, 1)
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    assert load.hit_time_cap
    assert len(load.records) == sum(1 for t in planned if t < 0.5)


def test_the_cap_holds_across_several_processes(standin):
    url = standin.start(slow_stream_handler(standin, chunks=10_000, gap_s=0.02))
    spec = LoadSettings(
        base_url=url,
        concurrency=4,
        max_tokens=8,
        warmup_requests=0,
        max_seconds=1.0,  # leaves both processes time to take their first prompts
        grace_s=0.3,
        processes=2,
    )
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    metrics = compute_metrics(load.records, hit_time_cap=load.hit_time_cap)
    assert load.hit_time_cap
    assert (metrics["completed"], metrics["errors"], metrics["incomplete"]) == (0, 0, 4)
    assert load.not_started == len(PROMPTS) - 4
    assert sorted(r.index for r in load.records) == [0, 1, 2, 3]
