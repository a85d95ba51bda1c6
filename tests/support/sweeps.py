"""Sweep points made by hand: cells of the output fixtures' matrix turned into the points of a
series (as the config side makes them from a list in `concurrency` or `request_rate`), and
metrics.json records with figures a test chooses."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.support.outputs import BASE, DRAFTER, cell_by_id
from workflow_scripts.vocabulary import Cell, Status, SweepPoint, identity, point_part

WORKLOAD = "sweep"


def point_cell(
    drafter: bool,
    value: float,
    axis: str = "concurrency",
    quant: str = "q4_0",
    workload: str = WORKLOAD,
    reference: dict | None = None,
    blocked: str | None = None,
) -> Cell:
    """A point of the series `tiny-llama__llamacpp-local__<quant>__<drafter>__<workload>`."""
    template = cell_by_id(DRAFTER if drafter else BASE)
    label = point_part("", axis, value)
    series = "__".join((template.model, template.engine, quant, template.drafter, workload))
    spec = template.workload_spec
    spec = dataclasses.replace(
        spec,
        concurrency=int(value) if axis == "concurrency" else spec.concurrency,
        request_rate=float(value) if axis == "request_rate" else spec.request_rate,
    )
    return dataclasses.replace(
        template,
        id=f"{series}-{label}",
        quant=quant,
        workload=f"{workload}-{label}",
        workload_spec=spec,
        reference=reference or {},
        blocked=blocked,
        sweep=SweepPoint(workload, axis, value, series, shared_server=True),
    )


def series_cells(drafter: bool, values: list[float], **kwargs) -> list[Cell]:
    return [point_cell(drafter, v, **kwargs) for v in values]


def point_metrics(
    cell: Cell,
    decode_tok_s: float | None = None,
    tpot_ms: float | None = None,
    status: str = Status.DONE,
    repeats: list[float] | None = None,
    spec: dict | None = None,
    server_start: dict | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """A point's metrics.json: `decode_tok_s` and the TPOT median as given (TTFT 10x the TPOT,
    p99s twice the medians); `repeats` puts ≥ 3 runs' decode tok/s in (as collapse_repeats
    leaves them), which is where the spec gain's interval then comes from."""
    out: dict[str, Any] = {**identity(cell), "status": status, "reason": reason}
    if server_start is not None:
        out["server_start"] = server_start
    if status != Status.DONE:
        return out
    out.update(
        {
            "completed": 20,
            "errors": 0,
            "incomplete": 0,
            "decode_tok_s": decode_tok_s,
            "prefill_tok_s": 2 * decode_tok_s,
            "req_per_s": decode_tok_s / 100,
            "ttft_ms": {"median": 10 * tpot_ms, "p99": 20 * tpot_ms},
            "tpot_ms": {"median": tpot_ms, "p99": 2 * tpot_ms},
            "spec": spec,
        }
    )
    if repeats is not None:
        out["repeats"] = {
            "runs": len(repeats),
            "done": len(repeats),
            "cells": [cell.id] * len(repeats),
            "figures": [
                {"decode_tok_s": v, "tpot_median_ms": tpot_ms * decode_tok_s / v} for v in repeats
            ],
        }
    return out


def spread(value: float, relative: float = 0.01) -> list[float]:
    """Three repeats around `value`: a tight t-interval on their mean."""
    return [value * (1 - relative), value, value * (1 + relative)]
