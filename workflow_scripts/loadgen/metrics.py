"""Request records -> one metrics record. Every figure is defined here, once (docs/metrics.md)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .records import ERROR, INCOMPLETE, OK, RequestRecord


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on sorted input."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def summarize_ms(values_s: Iterable[float]) -> dict[str, float | None]:
    """mean/median/p90/p99 in milliseconds; None for an empty list."""
    data = sorted(v * 1000.0 for v in values_s)
    if not data:
        return {"mean": None, "median": None, "p90": None, "p99": None, "count": 0}
    return {
        "mean": sum(data) / len(data),
        "median": percentile(data, 50),
        "p90": percentile(data, 90),
        "p99": percentile(data, 99),
        "count": len(data),
    }


def summarize(values: Iterable[float]) -> dict[str, float | None]:
    data = sorted(values)
    if not data:
        return {"mean": None, "median": None, "p90": None, "p99": None}
    return {
        "mean": sum(data) / len(data),
        "median": percentile(data, 50),
        "p90": percentile(data, 90),
        "p99": percentile(data, 99),
    }


def tpot_s(record: RequestRecord) -> float | None:
    """(e2e - TTFT) / (completion_tokens - 1), for more than one token."""
    if record.ttft_s is None or record.e2e_s is None or not record.completion_tokens:
        return None
    if record.completion_tokens <= 1:
        return None
    return (record.e2e_s - record.ttft_s) / (record.completion_tokens - 1)


def itl_gaps_s(record: RequestRecord) -> list[float]:
    """Gaps between consecutive content-bearing chunks."""
    times = record.chunk_times_s
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def itl_per_token_s(record: RequestRecord) -> list[float]:
    """Each chunk gap spread over the tokens that chunk carried (speculative decoding)."""
    if not record.completion_tokens or record.content_chunks < 2:
        return []
    tokens_per_chunk = record.completion_tokens / record.content_chunks
    return [gap / tokens_per_chunk for gap in itl_gaps_s(record)]


def send_lag_ms(records: Iterable[RequestRecord]) -> dict[str, float] | None:
    """How late the client sent scheduled requests: p50 and p99 of sent_s - scheduled_s in ms,
    over the records that have a schedule; None when none has (a closed loop)."""
    lags = sorted((r.sent_s - r.scheduled_s) * 1000.0 for r in records if r.scheduled_s is not None)
    if not lags:
        return None
    return {"p50": percentile(lags, 50), "p99": percentile(lags, 99)}


def by_turn(
    measured: Sequence[RequestRecord],
    hit_pct: Callable[[Sequence[RequestRecord]], float | None] | None = None,
) -> list[dict[str, Any]] | None:
    """Per conversation turn (records with a `turn`): its requests, the TTFT and TPOT of those
    completed as the whole run's figures, and the prefix cache's hit share of its completed
    requests where `hit_pct` (the engine's reading of per-response figures) gives one; None
    outside conversations."""
    turns = sorted({r.turn for r in measured if r.turn is not None})
    if not turns:
        return None
    rows = []
    for turn in turns:
        mine = [r for r in measured if r.turn == turn]
        done = [r for r in mine if r.status == OK]
        row: dict[str, Any] = {
            "turn": turn,
            "requests": len(mine),
            "ttft_ms": summarize_ms(r.ttft_s for r in done if r.ttft_s is not None),
            "tpot_ms": summarize_ms(t for r in done if (t := tpot_s(r)) is not None),
        }
        if hit_pct is not None and (hit := hit_pct(done)) is not None:
            row["prefix_cache_hit_pct"] = hit
        rows.append(row)
    return rows


def compute_metrics(
    records: Sequence[RequestRecord],
    hit_time_cap: bool = False,
    slo: dict[str, float] | None = None,
    turn_hit_pct: Callable[[Sequence[RequestRecord]], float | None] | None = None,
) -> dict[str, Any]:
    """The measured part of a run (warmup excluded) -> counts, rates and latency summaries;
    `turn_hit_pct` reads a conversation turn's prefix-cache hit share (`by_turn`)."""
    measured = [r for r in records if not r.warmup]
    done = [r for r in measured if r.status == OK]
    errors = [r for r in measured if r.status == ERROR]
    incomplete = [r for r in measured if r.status == INCOMPLETE]
    ends = [r.sent_s + r.e2e_s for r in measured if r.e2e_s is not None]
    starts = [r.sent_s for r in measured]
    duration = (max(ends) - min(starts)) if ends and starts else 0.0
    prompt_tokens = sum(r.prompt_tokens or 0 for r in done)
    completion_tokens = sum(r.completion_tokens or 0 for r in done)
    per_sec = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    gaps = [g for r in done for g in itl_gaps_s(r)]
    chunk_counts = [r.content_chunks for r in done if r.content_chunks]
    sources = Counter(r.token_count_source for r in done)
    metrics: dict[str, Any] = {
        "completed": len(done),
        "errors": len(errors),
        "incomplete": len(incomplete),
        "errors_by_reason": dict(Counter(r.error or "unknown" for r in errors)),
        "hit_time_cap": bool(hit_time_cap),
        "duration_s": duration,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "prefill_tok_s": per_sec(prompt_tokens),
        "decode_tok_s": per_sec(completion_tokens),
        "req_per_s": per_sec(len(done)),
        "ttft_ms": summarize_ms(r.ttft_s for r in done if r.ttft_s is not None),
        "tpot_ms": summarize_ms(t for r in done if (t := tpot_s(r)) is not None),
        "itl_ms": summarize_ms(gaps),
        "itl_per_token_ms": summarize_ms(g for r in done for g in itl_per_token_s(r)),
        "e2el_ms": summarize_ms(r.e2e_s for r in done if r.e2e_s is not None),
        "by_turn": by_turn(measured, turn_hit_pct),
        "tokens_per_chunk": summarize(
            r.completion_tokens / r.content_chunks
            for r in done
            if r.content_chunks and r.completion_tokens
        ),
        "content_chunks": sum(chunk_counts),
        "token_count_source": "usage" if set(sources) <= {"usage"} else dict(sources),
        "retries": sum(r.retries for r in measured),
        "send_lag_ms": send_lag_ms(measured),
    }
    if slo:
        good = [r for r in done if _meets_slo(r, slo)]
        metrics["goodput"] = {
            "slo": slo,
            "good_requests": len(good),
            "req_per_s": per_sec(len(good)),
        }
    return metrics


def _meets_slo(record: RequestRecord, slo: dict[str, float]) -> bool:
    if "ttft_ms" in slo and (record.ttft_s is None or record.ttft_s * 1000 > slo["ttft_ms"]):
        return False
    if "tpot_ms" in slo:
        t = tpot_s(record)
        if t is not None and t * 1000 > slo["tpot_ms"]:
            return False
    return True
