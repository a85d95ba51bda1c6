"""A run's requests as one table: each request's figures computed once from its record, by the
definitions of `metrics`, for everything that reads them request by request (a card's latency
figure, a latency goal's judgement, the intervals, the stability check). Stdlib only: the
latency goal's judgement runs while the Snakefile is parsed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from .metrics import e2el_from_schedule_s, latency_from, tpot_s, ttft_from_schedule_s
from .records import OK, RequestRecord


class RequestFigures(NamedTuple):
    """One request's row: what pairs it across runs (`RequestRecord.pair_key`), when it was
    sent, its tokens and its latencies in seconds (None where it has none; TTFT and E2E also
    from its scheduled time, its wait for a free slot counted: `metrics.wait_s`). A named
    tuple: a run of many thousand requests makes its rows in a fifth of a frozen dataclass's
    time."""

    pair_key: tuple[int, int]
    status: str
    warmup: bool
    sent_s: float
    prompt_tokens: int | None
    completion_tokens: int | None
    ttft_s: float | None
    e2e_s: float | None
    tpot_s: float | None
    ttft_from_schedule_s: float | None
    e2el_from_schedule_s: float | None

    @classmethod
    def of(cls, record: RequestRecord) -> RequestFigures:
        """The record's own fields as it has them, then the figures loadgen.metrics defines."""
        return cls(
            record.pair_key, record.status, record.warmup, record.sent_s,
            record.prompt_tokens, record.completion_tokens, record.ttft_s, record.e2e_s,
            tpot_s(record), ttft_from_schedule_s(record), e2el_from_schedule_s(record),
        )  # fmt: skip


@dataclass(frozen=True)
class RequestTable:
    """Every record of a run as a row, in the order requests.jsonl holds them (warm-up too:
    `measured` leaves it out), and where the measured requests' TTFT and E2E run from
    (`metrics.latency_from`: their schedule under open-loop arrivals, else their send)."""

    rows: tuple[RequestFigures, ...]
    latency_from: str

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> RequestTable:
        records = list(records)
        return cls(
            tuple(RequestFigures.of(r) for r in records),
            latency_from(r for r in records if not r.warmup),
        )

    @property
    def measured(self) -> list[RequestFigures]:
        return [r for r in self.rows if not r.warmup]

    @property
    def done(self) -> list[RequestFigures]:
        """The measured requests that completed: the ones every latency figure counts."""
        return [r for r in self.rows if r.status == OK and not r.warmup]


def request_tables(records: Mapping[str, Iterable[RequestRecord]]) -> dict[str, RequestTable]:
    """Each run's table, by the key its records are under (a cell's id)."""
    return {key: RequestTable.of(runs) for key, runs in records.items()}
