"""Each cell of a workload with a latency goal, judged in the summary and on its card: the
point's verdict, goodput, attainment and each objective's percentile beside its bound and limit.

Judged here, in the aggregate and card steps, from the cell's requests.jsonl and the goal's file
(never in the cell rule): a changed goal redoes the tables and cards and reruns no measurement.
The judgement is added to the metrics record the tables read, under `slo` (the shape of
`evaluate_point(...).to_dict()`, with the goal as text); metrics.json on disk stays the
measurement alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...loadgen.metrics import FROM_SCHEDULE, FROM_SEND
from ...loadgen.request_table import RequestTable
from ...slo.objectives import Slo
from ...slo.point import judge
from ...verdicts.bounds import CONFIDENCE, min_samples_for_upper
from ...vocabulary import Cell, Status
from .text import attainment_text, objective_text

LATENCY_FROM_TEXT = {
    FROM_SCHEDULE: "TTFT and E2E from each request's scheduled time (open-loop arrivals): a "
    "request that waited for a free slot is charged its wait.",
    FROM_SEND: "TTFT and E2E from each request's send (a closed loop).",
}
SLO_COLUMNS = ["slo_verdict", "goodput_req_s", "attainment", "slo", "slo_detail", "tail_note"]
TAIL_PERCENTILES = (90, 99)


def slo_entry(slo: Slo, metrics: Mapping[str, Any], requests: RequestTable) -> dict[str, Any]:
    """A cell's `slo` in the tables' metrics record: the goal as text and, for a cell that ran,
    its point result (`slo.point.judge`, as its `slo.json` holds it)."""
    result = judge(slo, metrics, requests)
    if result is None:
        return {"goal": slo.text, "verdict": None}
    return {
        "goal": slo.text,
        **result.to_dict(),
        "verdict": str(result.verdict),
        "detail": "; ".join(
            [objective_text(o) for o in result.objectives]
            + ([attainment_text(result.attainment)] if result.attainment.n else [])
        ),
    }


def with_slo(
    all_metrics: Sequence[dict[str, Any]],
    cells: Sequence[Cell],
    requests: Mapping[str, RequestTable],
    goals: Mapping[str, Slo],
) -> list[dict[str, Any]]:
    """The metrics records, each of a cell whose workload has a goal with its `slo` added
    (`requests`: each cell's requests' table, by id)."""
    by_id = {c.id: c for c in cells}
    out = []
    for metrics in all_metrics:
        cell = by_id.get(metrics.get("cell"))
        slo = goals.get(cell.workload_name) if cell else None
        if slo is not None:
            table = requests.get(cell.id) or RequestTable.of(())
            metrics = {**metrics, "slo": slo_entry(slo, metrics, table)}
        out.append(metrics)
    return out


def tail_note(metrics: Mapping[str, Any]) -> str:
    """Which of the summary's p90/p99 rest on too few requests to bound them from above (95 %,
    distribution-free: the largest of n values bounds the pP only once (P/100)^n <= 2.5 %)."""
    n = metrics.get("completed") or 0
    if metrics.get("status") != Status.DONE or not n:
        return ""
    short = [p for p in TAIL_PERCENTILES if n < min_samples_for_upper(p, CONFIDENCE)]
    if not short:
        return ""
    needs = ", ".join(f"p{p} needs {min_samples_for_upper(p, CONFIDENCE)}" for p in short)
    shown = "/".join(f"p{p}" for p in short)
    return f"{shown} from {n} requests: no upper bound ({needs})"


def slo_columns(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The summary's goal columns (empty without a goal) and the tail note (every cell)."""
    row: dict[str, Any] = {"tail_note": tail_note(metrics)}
    found = metrics.get("slo")
    if found:
        attainment = found.get("attainment") or {}
        good, n = attainment.get("good"), attainment.get("n")
        row.update(
            {
                "slo_verdict": found.get("verdict"),
                "goodput_req_s": found.get("goodput_req_s"),
                "attainment": good / n if n else None,
                "slo": found.get("goal"),
                "slo_detail": found.get("detail"),
                "slo_latency_from": found.get("latency_from"),
            }
        )
    return row


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} ms"


def slo_section(metrics: Mapping[str, Any]):
    """A card's goal: each objective's percentile with its bounds, limit and verdict, then the
    attainment and goodput; a bound too few requests cannot give says so. None without one."""
    from ..card.model import Section  # the card package (its build) imports this module

    found = metrics.get("slo")
    if not found:
        return None
    if found.get("verdict") is None:
        return Section("Latency goal", paragraphs=[f"{found['goal']}: not judged (not run)"])
    rows = []
    for o in found["objectives"]:
        objective, bound = o["objective"], o["bound"]
        label = f"{objective['figure'].removesuffix('_ms')} p{objective['percentile']:g}"
        interval = f"[{_ms(bound['lo'])}, {_ms(bound['hi'])}]"
        if bound["hi"] is None:
            needs = min_samples_for_upper(bound["percentile"], bound["confidence"])
            interval += f" (no upper bound from {bound['n']} requests; needs {needs})"
        rows.append(
            (label, _ms(bound["value"]), interval, f"≤ {objective['max_ms']:g} ms", o["verdict"])
        )
    attainment = found["attainment"]
    if attainment["n"]:
        target = attainment["target"]
        rows.append(
            (
                "attainment",
                f"{attainment['good'] / attainment['n']:.3f}",
                f"[{attainment['lo']:.3f}, {attainment['hi']:.3f}]",
                f"≥ {target:g}" if target is not None else "—",
                attainment["verdict"] or "—",
            )
        )
    goodput = found.get("goodput_req_s")
    paragraphs = [
        f"Goal: {found['goal']}. Verdict: **{found['verdict']}**. Goodput "
        f"{'—' if goodput is None else f'{goodput:.3f}'} req/s (requests meeting every "
        "objective per second of the run). Bounds: 95 % distribution-free (order statistics). "
        + LATENCY_FROM_TEXT.get(found.get("latency_from"), "")
    ]
    return Section(
        "Latency goal",
        ("Objective", "Measured", "95 % interval", "Limit", "Verdict"),
        rows,
        paragraphs=paragraphs,
    )
