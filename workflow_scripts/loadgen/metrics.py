"""Request records -> one metrics record. Every figure is defined here, once (docs/metrics.md)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
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


# A cell is flagged when its send lag passes this share of its TTFT (from the send) at the
# median or at p99. The lag is added whole to each late request's latency from its schedule, so
# past a tenth the from-send TTFT understates what the schedule's users waited by more than a
# TTFT median moves between repeats of a steady cell (a few %), and a lag that small against a
# real server's TTFT (tens of ms up) is the client's own timer jitter. Both percentiles: a wait
# behind a burst reaches the tail first, and a median-only check would pass a cell whose p99
# from the send hides seconds of queueing.
SEND_LAG_LIMIT_PCT = 10.0


# Where a latency goal's TTFT and E2E are counted from: each request's scheduled time under
# open-loop arrivals (a request that waited for a free slot is charged its wait), else its send.
FROM_SCHEDULE, FROM_SEND = "schedule", "send"


def open_loop(records: Iterable[RequestRecord]) -> bool:
    """Whether a load sent on a schedule (trace or Poisson arrivals): some record has one."""
    return any(r.scheduled_s is not None for r in records)


def latency_from(records: Iterable[RequestRecord]) -> str:
    """FROM_SCHEDULE for an open-loop load's records, else FROM_SEND."""
    return FROM_SCHEDULE if open_loop(records) else FROM_SEND


def wait_s(record: RequestRecord) -> float:
    """How long after it was due a request was sent: sent_s - scheduled_s; 0 for one without a
    schedule, sent as soon as it was due (a conversation's later turn, sent when the turn before
    ended and its think time passed)."""
    return 0.0 if record.scheduled_s is None else record.sent_s - record.scheduled_s


def ttft_from_schedule_s(record: RequestRecord) -> float | None:
    """TTFT counted from when the request was due: its wait for a free slot, then its TTFT."""
    return None if record.ttft_s is None else wait_s(record) + record.ttft_s


def e2el_from_schedule_s(record: RequestRecord) -> float | None:
    """End-to-end latency counted from when the request was due (its wait, then its E2E)."""
    return None if record.e2e_s is None else wait_s(record) + record.e2e_s


def send_lag_check(
    lag: dict[str, float] | None, ttft_ms: dict[str, float | None]
) -> dict[str, Any] | None:
    """The send lag's p50 and p99 as a share (%) of the TTFT's median and p99 from the send,
    and whether either passes SEND_LAG_LIMIT_PCT; None for a closed loop (no lag). A share
    with no TTFT to divide by (nothing completed) is None and flags nothing."""
    if lag is None:
        return None
    shares = {}
    for name, of in (("p50", "median"), ("p99", "p99")):
        ttft = ttft_ms.get(of)
        shares[f"{name}_pct_of_ttft"] = 100.0 * lag[name] / ttft if ttft else None
    passed = [s for s in shares.values() if s is not None and s > SEND_LAG_LIMIT_PCT]
    return {"limit_pct_of_ttft": SEND_LAG_LIMIT_PCT, **shares, "flagged": bool(passed)}


def sent_late(metrics: Mapping[str, Any] | None) -> bool | None:
    """Whether a cell's send lag passed SEND_LAG_LIMIT_PCT of its TTFT (metrics.json
    `send_lag_check`); None without the check (a closed loop, a cell that did not measure)."""
    found = (metrics or {}).get("send_lag_check")
    return None if not found else bool(found.get("flagged"))


def send_lag_note(metrics: Mapping[str, Any] | None) -> str:
    """A sentence when a cell was sent late beyond the limit, else ''."""
    found = (metrics or {}).get("send_lag_check")
    if not sent_late(metrics):
        return ""
    shares = [
        f"{name} {share:.0f} % of the TTFT {of}"
        for name, of in (("p50", "median"), ("p99", "p99"))
        if (share := found.get(f"{name}_pct_of_ttft")) is not None
    ]
    return (
        f"requests sent late for a free slot: send lag {' and '.join(shares)} (limit "
        f"{found['limit_pct_of_ttft']:g} %); TTFT and E2E from the send leave the wait out, "
        "the figures from the schedule count it"
    )


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


TIME_CAP = "time_cap"  # a stop's reason where the time cap, not a failed turn, ended it


def conversation_counts(
    measured: Sequence[RequestRecord], planned_turns: Sequence[int]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """How each planned conversation ended, and what became of its turns (`planned_turns`: each
    session's turns as planned, by its position in the run). A conversation `completed` every
    turn, was `stopped_by_failure` at a failed turn (its later turns not sent), or was
    `cut_by_time_cap` (before a turn, or with one in flight; one never started too); `stops`
    says where each started one that did not complete ended and why: the failed turn's error,
    or TIME_CAP. Turns: planned = sent + not_sent_after_failure + cut_by_time_cap."""
    by_session: dict[int, list[RequestRecord]] = {}
    for record in measured:
        if record.session is not None:
            by_session.setdefault(record.session, []).append(record)
    talks: dict[str, Any] = dict.fromkeys(
        ("planned", "completed", "stopped_by_failure", "cut_by_time_cap"), 0
    )
    turns: dict[str, Any] = dict.fromkeys(
        ("planned", "sent", "completed", "not_sent_after_failure", "cut_by_time_cap"), 0
    )
    stops: list[dict[str, Any]] = []
    for session, planned in enumerate(planned_turns):
        mine = sorted(by_session.get(session, []), key=lambda r: r.turn or 0)
        done = sum(r.status == OK for r in mine)
        left = max(planned - len(mine), 0)
        talks["planned"] += 1
        turns["planned"] += planned
        turns["sent"] += len(mine)
        turns["completed"] += done
        failed = next((r for r in mine if r.status == ERROR), None)
        if failed is not None:
            talks["stopped_by_failure"] += 1
            turns["not_sent_after_failure"] += left
            stops.append(_stop(session, failed, failed.error or ERROR))
        elif done < planned:
            talks["cut_by_time_cap"] += 1
            turns["cut_by_time_cap"] += left
            if mine:  # started: where the cap came, in flight or before the next turn
                cut = next((r for r in mine if r.status != OK), None)
                stops.append(_stop(session, mine[0], TIME_CAP, cut.turn if cut else len(mine) + 1))
        else:
            talks["completed"] += 1
    return {**talks, "stops": stops}, turns


def _stop(
    session: int, record: RequestRecord, reason: str, turn: int | None = None
) -> dict[str, Any]:
    """Where a conversation ended (its session, prompt, turn: `record`'s unless given) and why."""
    where = record.turn if turn is None else turn
    return {
        "session": session,
        "prompt_index": record.prompt_index,
        "turn": where,
        "reason": reason,
    }


def schedule_figures(
    measured: Sequence[RequestRecord], ttft_ms: dict[str, float | None]
) -> dict[str, Any]:
    """An open-loop load's TTFT and E2E from each request's scheduled time (mean, median, p90,
    p99, count over the completed requests, as `ttft_ms` and `e2el_ms` from the send), null for
    a closed loop, and the send-lag check against `ttft_ms` (`send_lag_check`)."""
    done = [r for r in measured if r.status == OK]
    scheduled = open_loop(measured)
    out: dict[str, Any] = {}
    for key, of in (("ttft", ttft_from_schedule_s), ("e2el", e2el_from_schedule_s)):
        values = (v for r in done if (v := of(r)) is not None)
        out[f"{key}_from_schedule_ms"] = summarize_ms(values) if scheduled else None
    out["send_lag_check"] = send_lag_check(send_lag_ms(measured), ttft_ms)
    return out


def compute_metrics(
    records: Sequence[RequestRecord],
    hit_time_cap: bool = False,
    slo: dict[str, float] | None = None,
    turn_hit_pct: Callable[[Sequence[RequestRecord]], float | None] | None = None,
    planned_turns: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The measured part of a run (warmup excluded) -> counts, rates and latency summaries;
    `turn_hit_pct` reads a conversation turn's prefix-cache hit share (`by_turn`);
    `planned_turns`, each conversation's turns as planned, gives `conversations` and `turns`
    (`conversation_counts`; None without)."""
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
    talks = None if planned_turns is None else conversation_counts(measured, planned_turns)
    metrics["conversations"], metrics["turns"] = talks or (None, None)
    metrics.update(schedule_figures(measured, metrics["ttft_ms"]))
    if slo:
        basis = latency_from(measured)
        good = [r for r in done if _meets_slo(r, slo, basis)]
        metrics["goodput"] = {
            "slo": slo,
            "good_requests": len(good),
            "req_per_s": per_sec(len(good)),
            "latency_from": basis,
        }
    return metrics


def _meets_slo(record: RequestRecord, slo: dict[str, float], basis: str) -> bool:
    ttft = ttft_from_schedule_s(record) if basis == FROM_SCHEDULE else record.ttft_s
    if "ttft_ms" in slo and (ttft is None or ttft * 1000 > slo["ttft_ms"]):
        return False
    if "tpot_ms" in slo:
        t = tpot_s(record)
        if t is not None and t * 1000 > slo["tpot_ms"]:
            return False
    return True
