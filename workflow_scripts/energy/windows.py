"""The windows a cell's energy is read over, from its request records, and the tokens each holds.

- The bench window: the first request sent to the last one finished (warm-up excluded), the
  window `decode_tok_s` divides by; its tokens are the completed requests' `completion_tokens`
  (and `prompt_tokens`), as metrics.json counts them.
- The steady state inside it (as ML.ENERGY reads it): from when every slot is busy (the client
  first has `slots` requests in flight) to when the first slot drains (the first request to end
  after the last one was sent: from then on, no new request takes a freed slot). A load that
  never fills its slots (arrivals too sparse, too few prompts) has none.

A window's tokens are those the completed requests streamed inside it: a request's
`completion_tokens` spread evenly over its content chunks (over its TTFT to its end when no
chunk time was kept), and its `prompt_tokens` counted at its first token (the prefill is done
by then). Over the bench window this gives exactly the requests' sums.

Times: a record's `sent_s` is seconds from the load's start and its other times are from its
own send; `origin_s` is the epoch time of the load's start, so every window is in epoch seconds
and can be held against the counters' reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..loadgen.records import OK, RequestRecord


@dataclass(frozen=True)
class Window:
    """[start_s, end_s], epoch seconds."""

    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, float]:
        return {"start_s": self.start_s, "end_s": self.end_s, "duration_s": self.duration_s}


@dataclass(frozen=True)
class WindowTokens:
    """A window and the tokens streamed in it."""

    window: Window
    output_tokens: float
    prompt_tokens: float

    @property
    def tokens(self) -> float:
        """Prompt and output tokens together."""
        return self.output_tokens + self.prompt_tokens


def measured(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if not r.warmup]


def bench_window(records: Sequence[RequestRecord], origin_s: float) -> Window | None:
    """First send to last finish of the measured requests; None when none finished."""
    runs = measured(records)
    ends = [r.sent_s + r.e2e_s for r in runs if r.e2e_s is not None]
    if not runs or not ends:
        return None
    return Window(origin_s + min(r.sent_s for r in runs), origin_s + max(ends))


def steady_window(records: Sequence[RequestRecord], origin_s: float, slots: int) -> Window | None:
    """From the moment `slots` requests are first in flight to the first end after the last
    send; None when the slots were never all busy, or drained at once. A request that never
    ended (cut off by the time cap) holds its slot to the end of the bench."""
    runs = measured(records)
    bench = bench_window(records, 0.0)
    if bench is None or slots < 1:
        return None
    events = []
    for r in runs:
        events.append((r.sent_s, 1))
        end = r.sent_s + r.e2e_s if r.e2e_s is not None else bench.end_s
        events.append((end, -1))
    events.sort(key=lambda event: (event[0], event[1]))  # an end before a send at one instant
    in_flight, full_at = 0, None
    for t, step in events:
        in_flight += step
        if in_flight >= slots:
            full_at = t
            break
    if full_at is None:
        return None
    last_send = max(r.sent_s for r in runs)
    ends = [t for t, step in events if step < 0 and t > last_send and t > full_at]
    if not ends:
        return None
    return Window(origin_s + full_at, origin_s + min(ends))


def _chunk_times(record: RequestRecord) -> list[float]:
    """The times (from the load's start) the record's output tokens arrived at, one per chunk."""
    if record.chunk_times_s:
        return [record.sent_s + t for t in record.chunk_times_s]
    if record.ttft_s is not None and record.e2e_s is not None:
        return [record.sent_s + record.ttft_s, record.sent_s + record.e2e_s]
    return []


def _inside(t: float, start: float, end: float, closed: bool) -> bool:
    return start <= t <= end if closed else start <= t < end


def _share_inside(
    times: Sequence[float], start: float, end: float, spread: bool, closed: bool
) -> float:
    """The share of a request's tokens inside the window: of its chunks, each holding an equal
    part; with only its first and last time (`spread`), the part of that span inside. Windows
    are [start, end), or [start, end] when `closed` (the last of a row of slices)."""
    if not times:
        return 0.0
    if spread:
        first, last = times
        if last <= first:
            return float(_inside(first, start, end, closed))
        overlap = min(end, last) - max(start, first)
        return max(0.0, overlap) / (last - first)
    return sum(_inside(t, start, end, closed) for t in times) / len(times)


def tokens_in(
    records: Sequence[RequestRecord], window: Window, origin_s: float, closed: bool = True
) -> WindowTokens:
    """The completed requests' output and prompt tokens streamed inside `window`."""
    start, end = window.start_s - origin_s, window.end_s - origin_s
    output = prompt = 0.0
    for r in measured(records):
        if r.status != OK:
            continue
        times = _chunk_times(r)
        share = _share_inside(times, start, end, not r.chunk_times_s, closed)
        output += (r.completion_tokens or 0) * share
        if times and _inside(times[0], start, end, closed):
            prompt += r.prompt_tokens or 0
    return WindowTokens(window, output, prompt)


def slices_of(window: Window, count: int) -> list[Window]:
    """`window` cut into `count` equal slices, end to end."""
    step = window.duration_s / count
    edges = [window.start_s + i * step for i in range(count)] + [window.end_s]
    return [Window(a, b) for a, b in zip(edges, edges[1:], strict=False)]


def slice_tokens(
    records: Sequence[RequestRecord], window: Window, count: int, origin_s: float
) -> list[WindowTokens]:
    """The tokens of each of `window`'s `count` slices: each token in exactly one slice."""
    slices = slices_of(window, count)
    return [
        tokens_in(records, piece, origin_s, closed=i == count - 1) for i, piece in enumerate(slices)
    ]
