"""A cell's repeats (`<cell>`, `<cell>__r2`, ...) -> one metrics record for the tables: figures
are the mean over the repeats that finished, counts the sum, and `repeats` keeps each repeat's
figures, from which the summary takes a t-interval (workflow_scripts.outputs.stats). A cell run once
passes through unchanged."""

from __future__ import annotations

import copy
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from ..config.cell_ids import repeat_of
from ..fidelity.pairs import floor_of
from ..process.machine_use import CLIENT_LIMITED, DISTURBED, FLAGGED_IN_RUN
from ..vocabulary import Cell, Status
from .compact import peak_mem_gib
from .energy.view import combined_energy, repeat_energy_figures

RATES = ("prefill_tok_s", "decode_tok_s", "req_per_s", "duration_s")
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "itl_per_token_ms", "e2el_ms")
LATENCIES += ("ttft_from_schedule_ms", "e2el_from_schedule_ms")  # open-loop loads
SEND_LAG = ("send_lag_check", "flagged")  # loadgen.metrics.send_lag_check
CHECKS = (CLIENT_LIMITED, DISTURBED, SEND_LAG)  # metrics.json object, its flag
COUNTS = ("completed", "errors", "incomplete", "prompt_tokens", "completion_tokens", "num_prompts")
CONVERSATION_COUNTS = ("conversations", "turns")  # objects of counts, summed as the counts
SHARES = ("prefix_cache_hit_pct",)  # a mean over the repeats, as the rates
MEMORY_PEAKS = ("peak_delta_gib", "peak_delta_less_client_gib")  # what the summary reads of `mem`
T = TypeVar("T")


def repeat_figures(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    """The headline figures of one run, by their summary.csv names."""
    mem, spec = metrics.get("mem") or {}, metrics.get("spec") or {}

    def stat(key: str, name: str) -> float | None:
        return (metrics.get(key) or {}).get(name)

    return {
        "decode_tok_s": metrics.get("decode_tok_s"),
        "prefill_tok_s": metrics.get("prefill_tok_s"),
        "req_per_s": metrics.get("req_per_s"),
        "ttft_median_ms": stat("ttft_ms", "median"),
        "ttft_p99_ms": stat("ttft_ms", "p99"),
        "tpot_median_ms": stat("tpot_ms", "median"),
        "tpot_p99_ms": stat("tpot_ms", "p99"),
        "e2el_median_ms": stat("e2el_ms", "median"),
        "peak_mem_gib": peak_mem_gib(mem),
        "acceptance_rate": spec.get("acceptance_rate"),
        "acceptance_length": spec.get("mean_acceptance_length"),
        **repeat_energy_figures(metrics),  # J per output token: its interval across repeats
    }


def _mean(values: Sequence[Any]) -> float | None:
    data = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.fmean(data) if data else None


def summed_counts(runs: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any] | None:
    """An object of counts (`conversations`, `turns`) summed over the runs that have it, each
    run's `stops` kept under its repeat's cell; None when none has it."""
    found = [(m["cell"], m[key]) for m in runs if isinstance(m.get(key), dict)]
    if not found:
        return None
    out: dict[str, Any] = {}
    for cell, counts in found:
        for name, value in counts.items():
            if name == "stops":
                out.setdefault(name, []).extend({**stop, "cell": cell} for stop in value)
            else:
                out[name] = out.get(name, 0) + value
    return out


def combine(base_cell: str, runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Repeats of one cell (in repeat order) -> one metrics record under the cell's own id."""
    done = [m for m in runs if m.get("status") == Status.DONE]
    out = copy.deepcopy(dict(done[0] if done else runs[0]))
    out["cell"] = base_cell
    out["repeats"] = {
        "runs": len(runs),
        "done": len(done),
        "cells": [m["cell"] for m in runs],
        "figures": [repeat_figures(m) for m in done],
    }
    for key, flag in CHECKS:  # a flag raised in any repeat stays raised, naming the repeat
        raised = next((m for m in done if (m.get(key) or {}).get(flag)), None)
        if raised is not None:
            out[key] = {**raised[key], FLAGGED_IN_RUN: raised["cell"]}
    if len(done) < 2:
        return out
    for key in RATES + SHARES:
        out[key] = _mean([m.get(key) for m in done])
    for key in LATENCIES:
        if isinstance(out.get(key), dict):
            out[key] = {
                stat: _mean([(m.get(key) or {}).get(stat) for m in done]) for stat in out[key]
            }
    for key in COUNTS:
        out[key] = sum(int(m.get(key) or 0) for m in runs)
    for key in CONVERSATION_COUNTS:
        out[key] = summed_counts(runs, key)
    out["hit_time_cap"] = any(m.get("hit_time_cap") for m in runs)
    for key in MEMORY_PEAKS:
        if key in (out.get("mem") or {}):
            out["mem"][key] = _mean([(m.get("mem") or {}).get(key) for m in done])
    if out.get("spec"):
        for key in ("acceptance_rate", "mean_acceptance_length"):
            out["spec"][key] = _mean([(m.get("spec") or {}).get(key) for m in done])
    if (energy := combined_energy(done)) is not None:  # per-token figures: the repeats' mean
        out["energy"] = energy
    return out


def _repeat_groups(all_metrics: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Each cell's runs in repeat order, by the cell's id; a floor run is in none."""
    groups: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for metrics in all_metrics:
        if floor_of(metrics["cell"]):
            continue
        base, repeat = repeat_of(metrics["cell"])
        groups.setdefault(base, []).append((repeat, metrics))
    return {
        base: [m for _, m in sorted(members, key=lambda item: item[0])]
        for base, members in groups.items()
    }


def first_runs(all_metrics: Sequence[Mapping[str, Any]], by_run: Mapping[str, T]) -> dict[str, T]:
    """What each run has in `by_run` (its records, its requests' table), folded as its cell's
    repeats are: under the cell's id, its first finished repeat's (else its first's)."""
    out = {}
    for base, runs in _repeat_groups(all_metrics).items():
        first = next((m for m in runs if m.get("status") == Status.DONE), runs[0])
        if first["cell"] in by_run:
            out[base] = by_run[first["cell"]]
    return out


def collapse_repeats(
    all_metrics: Sequence[Mapping[str, Any]],
    cells: Sequence[Cell] | None = None,
    records: Mapping[str, Any] | None = None,
) -> tuple[list[Mapping[str, Any]], list[Cell] | None, dict[str, Any]]:
    """Metrics, cells and request records with each cell's repeats folded into the cell: one
    combined record per cell, the config's repeat-1 cells, and the first finished repeat's
    records (what a bootstrap or a paired comparison uses when there are too few repeats). A
    cell's floor run (`<cell>__floor`) is in none: only the fidelity table reads it."""
    out_metrics = []
    for base, runs in _repeat_groups(all_metrics).items():
        if len(runs) == 1 and runs[0]["cell"] == base:
            out_metrics.append(runs[0])  # run once: exactly as without repeats
        else:
            out_metrics.append(combine(base, runs))
    out_records = first_runs(all_metrics, records or {})
    if cells is None:
        return out_metrics, None, out_records
    base_cells = [
        cell for cell in cells if repeat_of(cell.id)[1] == 1 and floor_of(cell.id) is None
    ]
    return out_metrics, base_cells, out_records
