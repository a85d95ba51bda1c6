"""One point (a cell's run) judged against a latency goal: each objective's percentile with its
distribution-free bounds and verdict, the attainment with its exact interval, the goodput, and
the point's verdict. A pure function of the run's requests (their table,
`loadgen.request_table`: each request's figures computed once) and the cell's metrics.json.

Which requests count: the measured (not warm-up), completed ones, as for every figure of
metrics.json. An errored or cut-off request is in no percentile and no attainment; `errors`
and `incomplete` say how many there were, so a table can show them beside the verdict.

Where TTFT and E2E run from (`latency_from`): under open-loop arrivals (a trace, Poisson; the
records carry a `scheduled_s`) from each request's scheduled time, so a request that waited for
a free slot is charged its wait, as a user arriving then would be; in a closed loop from the
send. TPOT runs between tokens, so no wait reaches it.

A request meets the goal when each of its figures is within the objective's limit. A request
of one token has no TPOT (no gap between tokens to be slow in): it meets a TPOT objective
vacuously, is not among the TPOT percentile's values (as in metrics.json's `tpot_ms`), and
still has to meet the TTFT and E2E ones.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..loadgen.metrics import FROM_SCHEDULE, FROM_SEND
from ..loadgen.records import ERROR, INCOMPLETE
from ..loadgen.request_table import RequestFigures, RequestTable
from ..verdicts.bounds import CONFIDENCE, PercentileBound, clopper_pearson, percentile_bound
from ..verdicts.verdict import Verdict, attainment_verdict, combined, percentile_verdict
from ..vocabulary import Status
from .objectives import Objective, Slo


def figure_ms(request: RequestFigures, figure: str, basis: str = FROM_SEND) -> float | None:
    """A request's ttft_ms / tpot_ms / e2el_ms, or None where it has none; TTFT and E2E from
    its scheduled time when `basis` is FROM_SCHEDULE."""
    scheduled = basis == FROM_SCHEDULE
    if figure == "ttft_ms":
        seconds = request.ttft_from_schedule_s if scheduled else request.ttft_s
    elif figure == "tpot_ms":
        seconds = request.tpot_s
    elif figure == "e2el_ms":
        seconds = request.e2el_from_schedule_s if scheduled else request.e2e_s
    else:
        raise ValueError(f"unknown latency figure {figure!r}")
    return None if seconds is None else seconds * 1000.0


def meets_goal(request: RequestFigures, slo: Slo, basis: str = FROM_SEND) -> bool:
    """Every objective's figure (TTFT and E2E from `basis`) within its limit; a missing TPOT
    (one token) meets it, a missing TTFT or E2E does not."""
    for objective in slo.objectives:
        value = figure_ms(request, objective.figure, basis)
        if value is None:
            if objective.figure == "tpot_ms":
                continue
            return False
        if value > objective.max_ms:
            return False
    return True


@dataclass(frozen=True)
class ObjectiveResult:
    """One objective at one point: the measured percentile, its bounds, the verdict."""

    objective: Objective
    bound: PercentileBound
    verdict: Verdict


@dataclass(frozen=True)
class AttainmentResult:
    """The fraction of completed requests meeting every objective, its exact interval, and
    its verdict against the target (None: the goal sets no target, so it decides nothing)."""

    good: int
    n: int
    lo: float
    hi: float
    target: float | None
    verdict: Verdict | None

    @property
    def fraction(self) -> float | None:
        return self.good / self.n if self.n else None


@dataclass(frozen=True)
class PointResult:
    """A point against the goal. Goodput counts the requests that met every objective over
    the run's duration (req/s and completion tok/s); `req_per_s` and `decode_tok_s` are the
    cell's own throughput, all requests counted; `wall_s` what the probe cost; `latency_from`
    where TTFT and E2E ran from (FROM_SCHEDULE: an open-loop load; FROM_SEND)."""

    verdict: Verdict
    objectives: tuple[ObjectiveResult, ...]
    attainment: AttainmentResult
    completed: int
    errors: int
    incomplete: int
    goodput_req_s: float | None
    goodput_decode_tok_s: float | None
    req_per_s: float | None
    decode_tok_s: float | None
    duration_s: float | None
    wall_s: float | None
    latency_from: str = FROM_SEND

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a probe's JSON (the verdicts are str)."""
        return asdict(self)


def evaluate_point(
    slo: Slo,
    requests: RequestTable,
    metrics: Mapping[str, Any],
    confidence: float = CONFIDENCE,
) -> PointResult:
    """Judge one run: `requests` its requests.jsonl's table, `metrics` the cell's metrics.json
    (duration_s, req_per_s, decode_tok_s, started_at, finished_at are read). The point passes
    when every objective and the attainment pass; under open-loop arrivals TTFT and E2E run
    from each request's scheduled time."""
    measured, done = requests.measured, requests.done
    basis = requests.latency_from
    results = []
    for objective in slo.objectives:
        values = [v for r in done if (v := figure_ms(r, objective.figure, basis)) is not None]
        bound = percentile_bound(values, objective.percentile, confidence)
        results.append(
            ObjectiveResult(
                objective, bound, percentile_verdict(bound.lo, bound.hi, objective.max_ms)
            )
        )
    good = [r for r in done if meets_goal(r, slo, basis)]
    lo, hi = clopper_pearson(len(good), len(done), confidence)
    target = slo.attainment
    attainment = AttainmentResult(
        len(good),
        len(done),
        lo,
        hi,
        target,
        None if target is None else attainment_verdict(lo, hi, target),
    )
    parts = [o.verdict for o in results] + ([attainment.verdict] if attainment.verdict else [])
    duration = metrics.get("duration_s")
    per_s = (lambda x: x / duration) if duration else (lambda x: None)
    return PointResult(
        verdict=combined(parts),
        objectives=tuple(results),
        attainment=attainment,
        completed=len(done),
        errors=sum(r.status == ERROR for r in measured),
        incomplete=sum(r.status == INCOMPLETE for r in measured),
        goodput_req_s=per_s(len(good)),
        goodput_decode_tok_s=per_s(sum(r.completion_tokens or 0 for r in good)),
        req_per_s=metrics.get("req_per_s"),
        decode_tok_s=metrics.get("decode_tok_s"),
        duration_s=duration,
        wall_s=wall_s(metrics),
        latency_from=basis,
    )


def wall_s(metrics: Mapping[str, Any]) -> float | None:
    """finished_at - started_at (whole seconds, as metrics.json stamps them), else the
    server's start plus the measured run."""
    try:
        stamps = [
            calendar.timegm(time.strptime(metrics[key], "%Y-%m-%dT%H:%M:%SZ"))
            for key in ("started_at", "finished_at")
        ]
        return float(stamps[1] - stamps[0])
    except (KeyError, TypeError, ValueError):
        pass
    parts = [metrics.get("ready_s"), metrics.get("duration_s")]
    known = [p for p in parts if isinstance(p, int | float)]
    return float(sum(known)) if known else None


def judge(slo: Slo, metrics: Mapping[str, Any], requests: RequestTable) -> PointResult | None:
    """A cell judged against a goal: its point result when it ran (status done), None when it
    did not (a cell that did not run decides nothing). What `slo.json` and the tables' `slo`
    entry both hold."""
    if metrics.get("status") != Status.DONE:
        return None
    return evaluate_point(slo, requests, metrics)
