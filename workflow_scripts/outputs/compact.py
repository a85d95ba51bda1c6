"""A cell's summary row, and the compact view of it: the dozen columns a reader compares, as
text. summary.md, the HTML summary and the table a run ends with all show this one view;
summary.csv keeps every column. Stdlib only: the Snakefile imports it when it is parsed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..text import first_line
from ..vocabulary import Status, identity_columns
from .energy.view import energy_columns

NOT_RUN = "not run"
REF_PREFIX = "ref_"
PUBLISHED = " (published)"
REASON_CHARS = 100
UNDERSTATED = " (understated)"  # a MemAvailable drop below what the server holds (mem_note)


def clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, marked where it was cut."""
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def number_text(value: Any, digits: int = 2) -> str:
    if is_missing(value):
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def median_of(metrics: Mapping[str, Any], key: str) -> float | None:
    value = metrics.get(key)
    return value.get("median") if isinstance(value, dict) else None


def peak_mem_gib(mem: Mapping[str, Any]) -> float | None:
    """The summary's peak memory: the MemAvailable drop below the pre-launch baseline less the
    load client's own RSS rise (`mem.peak_delta_less_client_gib`), so the server is not charged
    for our client; a metrics.json from before that figure has only the drop."""
    less_client = mem.get("peak_delta_less_client_gib")
    return mem.get("peak_delta_gib") if less_client is None else less_client


def summary_row(
    metrics: Mapping[str, Any], reference: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One cell's summary.csv row from its metrics.json (and its published figures)."""
    mem = metrics.get("mem") or {}
    spec = metrics.get("spec") or {}
    row = {
        "cell": metrics["cell"],
        **identity_columns(metrics),
        "content": metrics.get("content"),
        "concurrency": metrics.get("concurrency"),
        "num_prompts": metrics.get("num_prompts"),
        "status": metrics.get("status"),
        "completed": metrics.get("completed"),
        "errors": metrics.get("errors"),
        "incomplete": metrics.get("incomplete"),
        "prefill_tok_s": metrics.get("prefill_tok_s"),
        "decode_tok_s": metrics.get("decode_tok_s"),
        "req_per_s": metrics.get("req_per_s"),
        "ttft_median_ms": median_of(metrics, "ttft_ms"),
        "tpot_median_ms": median_of(metrics, "tpot_ms"),
        "itl_median_ms": median_of(metrics, "itl_ms"),
        "e2el_median_ms": median_of(metrics, "e2el_ms"),
        "peak_mem_gib": peak_mem_gib(mem),
        "server_rss_peak_gib": mem.get("server_rss_peak_gib"),
        "acceptance_rate": spec.get("acceptance_rate"),
        "acceptance_length": spec.get("mean_acceptance_length"),
        "prefix_cache": metrics.get("prefix_cache"),
        "prefix_cache_hit_pct": metrics.get("prefix_cache_hit_pct"),
        "hit_time_cap": metrics.get("hit_time_cap"),
        "duration_s": metrics.get("duration_s"),
        "synthetic": bool(metrics.get("synthetic")),
        "reason": first_line(metrics.get("reason")),
        "build_variant": (metrics.get("engine_info") or {}).get("variant"),
        **conversation_columns(metrics),
        **energy_columns(metrics),  # metrics.json `energy` (outputs/energy/view.py)
    }
    for key, value in (reference or {}).items():
        row[REF_PREFIX + key] = value
    return row


# A conversation cell's counts in its summary row: metrics.json `conversations` and `turns`.
CONVERSATION_COLUMNS = {
    "conversations_planned": ("conversations", "planned"),
    "conversations_completed": ("conversations", "completed"),
    "turns_planned": ("turns", "planned"),
    "turns_not_sent_after_failure": ("turns", "not_sent_after_failure"),
    "turns_cut_by_time_cap": ("turns", "cut_by_time_cap"),
}


def conversation_columns(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's conversation and turn counts by their summary names (None outside them)."""
    return {
        column: (metrics.get(key) or {}).get(count)
        for column, (key, count) in CONVERSATION_COLUMNS.items()
    }


def _count(row: Mapping[str, Any], key: str) -> int:
    value = row.get(key)
    return 0 if is_missing(value) else int(value)


def _turns(count: int) -> str:
    return f"{count} turn" if count == 1 else f"{count} turns"


def completed_text(row: Mapping[str, Any]) -> str:
    """`6/6`, with errors, incomplete requests and the time cap when there were any; a
    conversation cell's turns and conversations apart (`17/17 turns, 8/8 conversations`), the
    turns a failure left unsent and those the time cap cut."""
    completed, total = row.get("completed"), row.get("num_prompts")
    if is_missing(completed):
        return ""
    turns = _count(row, "turns_planned")
    if turns:
        text = (
            f"{int(completed)}/{turns} turns, {_count(row, 'conversations_completed')}/"
            f"{_count(row, 'conversations_planned')} conversations"
        )
    elif row.get("content") == "conversation":  # counted before turns were: no planned count
        of = "" if is_missing(total) else f", {int(total)} conversations"
        text = f"{int(completed)} turns{of}"
    else:
        text = f"{int(completed)}/{int(total)}" if not is_missing(total) else f"{int(completed)}"
    if _count(row, "errors"):
        text += f", {_count(row, 'errors')} errors"
    if not_sent := _count(row, "turns_not_sent_after_failure"):
        text += f" ({_turns(not_sent)} after them not sent)"
    if _count(row, "incomplete"):
        text += f", {_count(row, 'incomplete')} incomplete"
    if row.get("hit_time_cap") is True:
        text += ", hit the time cap"
        if cut := _count(row, "turns_cut_by_time_cap"):
            text += f" ({_turns(cut)} never ran)"
    return text


@dataclass(frozen=True)
class Column:
    """A compact column: its header, the summary row key it shows, the reference keys a
    published figure for it may sit under, and the decimals it keeps."""

    header: str
    key: str
    published: tuple[str, ...] = ()
    digits: int = 2
    optional: bool = False  # shown only when some row has a value


COMPACT_COLUMNS = [
    Column("cell", "cell"),
    Column("status", "status"),
    Column("completed", "completed", ("completed",)),
    Column("decode_tok_s", "decode_tok_s", ("decode_tok_s",)),
    Column("prefill_tok_s", "prefill_tok_s", ("prefill_tok_s",)),
    Column("ttft_median_ms", "ttft_median_ms", ("ttft_median_ms",), 1),
    Column("tpot_median_ms", "tpot_median_ms", ("tpot_median_ms",), 1),
    # open-loop loads: TTFT counted from each request's scheduled time, its wait included
    Column("ttft_from_schedule_median_ms", "ttft_from_schedule_median_ms", digits=1, optional=True),
    # the engine's prefix cache: prompt tokens it served, % (engines that report it)
    Column("cache_hit_pct", "prefix_cache_hit_pct", digits=1, optional=True),
    Column("peak_mem_gib", "peak_mem_gib", ("peak_mem_gib",)),
    Column("server_rss_peak_gib", "server_rss_peak_gib"),
    Column("acceptance_rate", "acceptance_rate", ("acceptance_rate",), 3),
    Column(
        "acceptance_length",
        "acceptance_length",
        ("acceptance_length", "mean_acceptance_length"),
    ),
    # energy per output token over the bench, and dollars per million where a price is given
    Column("j_per_output_token", "j_per_output_token", digits=4, optional=True),
    Column("usd_per_m_output_tokens", "usd_per_m_output_tokens", digits=4, optional=True),
    Column("reason", "reason"),
]


# Shown before `reason` when some row has an interval: where its `± half-width` comes from.
INTERVAL_COLUMN = Column("interval", "interval_source")


def interval_text(row: Mapping[str, Any]) -> str:
    """`bootstrap, 40 requests` or `3 repeats`: what a row's `±` was computed from."""
    source, n = row.get("interval_source"), row.get("interval_n")
    if is_missing(source) or not source:
        return ""
    if is_missing(n):
        return str(source)
    return f"{int(n)} repeats" if source == "repeats" else f"{source}, {int(n)} requests"


def with_interval(row: Mapping[str, Any], key: str, digits: int) -> str:
    """`value ± half-width` when the row has the figure's 95 % interval (`<key>_lo/_hi`)."""
    value, lo, hi = row.get(key), row.get(f"{key}_lo"), row.get(f"{key}_hi")
    text = number_text(value, digits)
    if not text or is_missing(lo) or is_missing(hi):
        return text
    return f"{text} ± {number_text((hi - lo) / 2, digits)}"


def _published(row: Mapping[str, Any], column: Column) -> Any:
    values = (row.get(REF_PREFIX + key) for key in column.published)
    return next((value for value in values if not is_missing(value)), None)


def _measured(row: Mapping[str, Any], column: Column) -> str:
    done = row.get("status") == Status.DONE
    if column.key == "completed":
        return completed_text(row)
    if column.key == "reason":  # why a cell did not finish, on one line
        return "" if done else clip(first_line(row.get("reason")), REASON_CHARS)
    if column.key in ("cell", "status"):
        return str(row.get(column.key) or "")
    if column.key == INTERVAL_COLUMN.key:
        return interval_text(row) if done else ""
    if column.key == "peak_mem_gib" and done and row.get("mem_delta_understates") is True:
        return with_interval(row, column.key, column.digits) + UNDERSTATED  # the note says why
    # a cell that did not finish has figures that compare with nothing
    return with_interval(row, column.key, column.digits) if done else ""


def compact_view(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[dict[str, str]]]:
    """Summary rows -> (headers, rows of text). An optional column shows only when some row has
    its figure, a `(published)` column follows a measured one only when some cell has a
    published figure for it; figures with an interval read
    `value ± half-width`, and an `interval` column then says where it came from."""
    columns: list[tuple[str, Column, bool]] = []
    with_intervals = any(interval_text(row) for row in rows)
    for column in COMPACT_COLUMNS:
        if column.optional and all(is_missing(row.get(column.key)) for row in rows):
            continue
        if column.key == "reason" and with_intervals:
            columns.append((INTERVAL_COLUMN.header, INTERVAL_COLUMN, False))
        columns.append((column.header, column, False))
        if column.published and any(_published(row, column) is not None for row in rows):
            columns.append((column.header + PUBLISHED, column, True))
    view = [
        {
            header: number_text(_published(row, column), column.digits)
            if published
            else _measured(row, column)
            for header, column, published in columns
        }
        for row in rows
    ]
    return [header for header, _, _ in columns], view
