"""The bench and steady-state windows and their tokens, from hand-made request records."""

from __future__ import annotations

import pytest

from workflow_scripts.energy.windows import (
    Window,
    bench_window,
    slice_tokens,
    steady_window,
    tokens_in,
)
from workflow_scripts.loadgen.records import ERROR, OK, RequestRecord

ORIGIN = 1_700_000_000.0


def request(index, sent, end, tokens=4, prompt=10, status=OK, chunks=None, warmup=False):
    """A request sent at `sent` that ends at `end` (load-start seconds), its `tokens` in as
    many chunks, evenly from 1 s after the send to its end (unless `chunks` says)."""
    e2e = None if end is None else end - sent
    if chunks is None and e2e is not None:
        first = min(1.0, e2e)
        chunks = [first + (e2e - first) * i / max(1, tokens - 1) for i in range(tokens)]
    return RequestRecord(
        index=index,
        prompt_index=index,
        status=status,
        warmup=warmup,
        sent_s=sent,
        ttft_s=chunks[0] if chunks else None,
        e2e_s=e2e,
        chunk_times_s=chunks or [],
        prompt_tokens=prompt,
        completion_tokens=tokens if status == OK else None,
    )


def closed_loop():
    """Two slots, five requests: r0 and r1 at 0; r2 when r0 ends (3), r3 when r1 ends (4), r4
    when r2 ends (6); then r3 ends at 7 (the first slot that drains), r4 at 9."""
    return [
        request(-1, -5.0, -4.0, warmup=True),
        request(0, 0.0, 3.0),
        request(1, 0.0, 4.0),
        request(2, 3.0, 6.0),
        request(3, 4.0, 7.0),
        request(4, 6.0, 9.0),
    ]


def test_the_bench_window_runs_from_the_first_send_to_the_last_end():
    window = bench_window(closed_loop(), ORIGIN)
    assert window == Window(ORIGIN + 0.0, ORIGIN + 9.0)
    assert bench_window([request(0, 0.0, None, status=ERROR)], ORIGIN) is None


def test_the_steady_state_runs_from_every_slot_busy_to_the_first_drained():
    assert steady_window(closed_loop(), ORIGIN, slots=2) == Window(ORIGIN + 0.0, ORIGIN + 7.0)
    # one request at a time never fills two slots
    one_by_one = [request(0, 0.0, 2.0), request(1, 2.0, 4.0), request(2, 4.0, 6.0)]
    assert steady_window(one_by_one, ORIGIN, slots=2) is None
    assert steady_window(one_by_one, ORIGIN, slots=1) == Window(ORIGIN + 0.0, ORIGIN + 6.0)


def test_slots_filled_late_start_the_steady_state_then():
    records = [request(0, 0.0, 5.0), request(1, 1.5, 6.0), request(2, 5.0, 8.0)]
    assert steady_window(records, ORIGIN, slots=2) == Window(ORIGIN + 1.5, ORIGIN + 6.0)


def test_a_windows_tokens_are_the_chunks_streamed_in_it():
    records = closed_loop()
    bench = tokens_in(records, bench_window(records, ORIGIN), ORIGIN)
    assert (bench.output_tokens, bench.prompt_tokens) == (20, 50)  # the five completed
    # r0's chunks at 1, 5/3, 7/3, 3: [0, 2] holds two of its four, r1's (1, 2, 3, 4) two
    early = tokens_in(records, Window(ORIGIN, ORIGIN + 2.0), ORIGIN)
    assert early.output_tokens == pytest.approx(4.0)
    assert early.prompt_tokens == 20  # r0's and r1's first tokens came before 2 s


def test_a_request_without_chunk_times_spreads_its_tokens_over_its_stream():
    record = request(0, 0.0, 5.0, tokens=8, chunks=[])
    record.ttft_s = 1.0
    half = tokens_in([record], Window(ORIGIN + 1.0, ORIGIN + 3.0), ORIGIN)
    assert half.output_tokens == pytest.approx(4.0)


def test_slices_hold_every_token_once():
    records = closed_loop()
    window = steady_window(records, ORIGIN, slots=2)
    pieces = slice_tokens(records, window, 7, ORIGIN)
    whole = tokens_in(records, window, ORIGIN)
    assert [p.window.duration_s for p in pieces] == pytest.approx([1.0] * 7)
    assert sum(p.output_tokens for p in pieces) == pytest.approx(whole.output_tokens)
    assert sum(p.prompt_tokens for p in pieces) == whole.prompt_tokens
