"""Load sweeps as tables: each point of a series (one model × engine × quant × drafter × workload
at several concurrencies or request rates) with its figures and intervals, the frontier of
throughput against interactivity over every point, each drafter point's gain over its base
point, and where along the load a drafter stops paying. Pure functions of the metrics (a cell's
repeats already folded in: repeats.collapse_repeats), request records and cells; the rule's
body that reads and writes them is sweep_files.py."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np
import pandas as pd

from ..loadgen.records import OK, RequestRecord
from ..process.machine_use import disturbed
from ..vocabulary import NO_DRAFTER, Cell, CellData, CellMetrics, Status
from .changes import FASTER
from .compact import REF_PREFIX, is_missing, number_text, summary_row
from .spec_gain import spec_gain_table
from .stats import MIN_REPEATS, interval_from_repeats, t975
from .tables import figure_intervals, identity_from_cell, merge_with_cells

CONCURRENCY = "concurrency"  # the other axis: request_rate

# sweeps.csv: the contract's columns first, then what a reader needs to trust them.
SWEEP_FIGURES = [
    "decode_tok_s",
    "interactivity_tok_s",
    "tpot_median_ms",
    "tpot_p99_ms",
    "ttft_median_ms",
    "ttft_p99_ms",
    "req_per_s",
    "decode_tok_s_per_gpu",
]
SWEEP_COLUMNS = [
    "cell",
    "series",
    "axis",
    "concurrency",
    "request_rate",
    "point",
    "status",
    *SWEEP_FIGURES,
    "completed",
    "errors",
    "gpus",
    *[f"{name}_{end}" for name in SWEEP_FIGURES for end in ("lo", "hi")],
    "interval_source",
    "interval_n",
    "server_start",
    "server_start_position",
    "model",
    "engine",
    "quant",
    "drafter",
    "workload",
    "reason",
    "disturbed",  # other work on the machine during the point's bench (machine_use.disturbed)
]

# The figures a point's row takes from its metrics, each with its interval.
MEASURED = [
    "decode_tok_s",
    "tpot_median_ms",
    "tpot_p99_ms",
    "ttft_median_ms",
    "ttft_p99_ms",
    "req_per_s",
]

PARETO_COLUMNS = [
    "cell",
    "series",
    "axis",
    "concurrency",
    "request_rate",
    "point",
    "interactivity_tok_s",
    "decode_tok_s",
    "stretch",
    "disturbed",  # the frontier point rests on a disturbed measurement
]

# A drafter point's published figures beside the measured ones: (column, the reference's keys).
GAIN_REFERENCES = [
    ("ref_decode_tok_s", "drafter", ("decode_tok_s",)),
    ("ref_base_decode_tok_s", "base", ("decode_tok_s",)),
    ("ref_tpot_median_ms", "drafter", ("tpot_median_ms",)),
    ("ref_acceptance_rate", "drafter", ("acceptance_rate",)),
    ("ref_acceptance_length", "drafter", ("acceptance_length", "mean_acceptance_length")),
]
SPEC_GAIN_SWEEP_COLUMNS = [
    "series",
    "base_series",
    "axis",
    "concurrency",
    "request_rate",
    "point",
    "decode_gain_pct",
    "decode_gain_lo_pct",
    "decode_gain_hi_pct",
    "verdict",
    "tpot_change_pct",
    "tpot_change_lo_pct",
    "tpot_change_hi_pct",
    "acceptance_rate",
    "acceptance_rate_lo",
    "acceptance_rate_hi",
    "acceptance_interval_source",
    "acceptance_length",
    "acceptance_differs",
    "acceptance_note",
    "base_decode_tok_s",
    "drafter_decode_tok_s",
    "base_tpot_median_ms",
    "drafter_tpot_median_ms",
    "gain_interval_source",
    "drafter_cell",
    "base_cell",
    "flags",
    *[column for column, _, _ in GAIN_REFERENCES],
    "ref_decode_gain_pct",
    "disturbed",  # either side of the pair (flags names which)
]

CROSSOVER_COLUMNS = [
    "series",
    "base_series",
    "axis",
    "last_faster",
    "first_not_faster",
    "summary",
    "monotone",
    "last_faster_gain_pct",
    "last_faster_gain_lo_pct",
    "last_faster_gain_hi_pct",
    "first_not_faster_gain_pct",
    "first_not_faster_gain_lo_pct",
    "first_not_faster_gain_hi_pct",
    "first_not_faster_verdict",
    "interval_source",
    "points",
    "rests_on_disturbed",  # the judged points whose pair is disturbed: the answer rests on them
]

EVERY_POINT, NEVER = "faster at every point", "never faster"
NO_BASE = "no base series with the same points"
NO_VERDICT = "no verdict at any point"


def point_label(axis: str, value: float) -> str:
    """`c8` for a concurrency, `r2.5` for a request rate: how cell ids name a point."""
    return f"c{int(value)}" if axis == CONCURRENCY else f"r{value:g}"


def sweep_points(cells: Sequence[CellData]) -> list[Cell]:
    """The points of every series, each series together in the config's order, its points by
    load (a series' points may be listed in any order)."""
    cells = [cell for cell in map(Cell.of, cells) if cell.sweep is not None]
    first = {}
    for i, cell in enumerate(cells):
        first.setdefault(cell.sweep.series, i)
    return sorted(cells, key=lambda c: (first[c.sweep.series], c.sweep.value))


def _reciprocal(value: Any) -> float | None:
    return None if is_missing(value) or value <= 0 else 1000.0 / value


def _per(value: Any, gpus: int | None) -> float | None:
    return None if is_missing(value) or not gpus else value / gpus


def point_row(
    cell: Cell, row: Mapping[str, Any], metrics: CellMetrics, gpus: int | None
) -> dict[str, Any]:
    """One sweeps.csv row from the point's summary row and intervals (as the summary has them:
    tables.summary_row, tables.figure_intervals). A point that did not finish keeps its status
    and reason, no figures. Interactivity is 1000 / TPOT median, so its interval is the TPOT
    median's, inverted."""
    sweep = cell.sweep
    server = metrics.get("server_start") or {}
    out: dict[str, Any] = {
        "cell": cell.id,
        "series": sweep.series,
        "axis": sweep.axis,
        "concurrency": cell.concurrency,
        "request_rate": cell.workload_spec.request_rate,
        "point": point_label(sweep.axis, sweep.value),
        "status": row.get("status"),
        "gpus": gpus or None,
        "server_start": server.get("id"),
        "server_start_position": server.get("position"),
        **{key: getattr(cell, key) for key in ("model", "engine", "quant", "drafter", "workload")},
        "reason": row.get("reason") or "",
        "disturbed": disturbed(metrics),
    }
    out[sweep.axis] = int(sweep.value) if sweep.axis == CONCURRENCY else float(sweep.value)
    if row.get("status") != Status.DONE:
        return out
    for key in ("completed", "errors", "interval_source", "interval_n"):
        out[key] = row.get(key)
    for name in MEASURED:
        for suffix in ("", "_lo", "_hi"):
            out[name + suffix] = row.get(name + suffix)
    out["interactivity_tok_s"] = _reciprocal(row.get("tpot_median_ms"))
    out["interactivity_tok_s_lo"] = _reciprocal(row.get("tpot_median_ms_hi"))
    out["interactivity_tok_s_hi"] = _reciprocal(row.get("tpot_median_ms_lo"))
    for suffix in ("", "_lo", "_hi"):
        out["decode_tok_s_per_gpu" + suffix] = _per(row.get("decode_tok_s" + suffix), gpus)
    return out


def sweep_table(
    all_metrics: Sequence[CellMetrics],
    cells: Sequence[CellData],
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
    gpus: Mapping[str, int | None] | None = None,
) -> pd.DataFrame:
    """sweeps.csv: one row per point of every series, failed, blocked and not-run points too.
    `gpus`: each cell's `resources.gpu` (0 or absent: no per-GPU figure)."""
    points = sweep_points(cells)
    ids = {cell.id for cell in points}
    metrics = [m for m in all_metrics if m["cell"] in ids]
    by_id = {m["cell"]: m for m in metrics}
    records, gpus = records or {}, gpus or {}
    out = []
    for cell, merged in zip(points, merge_with_cells(metrics, points), strict=True):
        row = {**summary_row(merged), **figure_intervals(merged, records.get(cell.id), MEASURED)}
        out.append(point_row(cell, row, by_id.get(cell.id, {}), gpus.get(cell.id)))
    frame = pd.DataFrame(out, columns=SWEEP_COLUMNS)
    for column in ("concurrency", "completed", "errors", "gpus", "interval_n"):
        frame[column] = frame[column].astype("Int64")
    frame["server_start_position"] = frame["server_start_position"].astype("Int64")
    return frame


# --- the frontier -------------------------------------------------------------------------


def pareto_frontier(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the non-dominated (x, y): no other point has ≥ both and > one. Two points
    at the same place are both on it. O(n log n): by x falling, a point is on the frontier when
    its y is the highest of its x and above every y of a larger x."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    on, best, i = [], -math.inf, 0
    while i < len(order):
        x = points[order[i]][0]
        group = []
        while i < len(order) and points[order[i]][0] == x:
            group.append(order[i])
            i += 1
        top = points[group[0]][1]  # the group is sorted by y falling
        if top > best:
            on += [j for j in group if points[j][1] == top]
            best = top
    return sorted(on)


def pareto_table(sweeps: pd.DataFrame) -> pd.DataFrame:
    """pareto.csv: the frontier of decode tok/s (throughput) against interactivity over every
    finished point of every series, by interactivity rising (so throughput falling); `stretch`
    numbers the runs of consecutive frontier points one series owns; `disturbed` marks a
    frontier point measured while other work used the machine."""
    done = sweeps[
        (sweeps["status"] == Status.DONE)
        & sweeps["decode_tok_s"].map(lambda v: not is_missing(v))
        & sweeps["interactivity_tok_s"].map(lambda v: not is_missing(v))
    ]
    xy = list(
        zip(
            done["interactivity_tok_s"].astype(float),
            done["decode_tok_s"].astype(float),
            strict=True,
        )
    )
    frontier = done.iloc[pareto_frontier(xy)]
    frontier = frontier.sort_values(
        ["interactivity_tok_s", "decode_tok_s", "series"],
        ascending=[True, False, True],
        kind="stable",
    )
    frame = frontier[PARETO_COLUMNS[:-2]].reset_index(drop=True).copy()
    owners = list(frame["series"])
    changes = [0] + [int(a != b) for a, b in zip(owners, owners[1:], strict=False)]
    frame["stretch"] = pd.array([1 + c for c in accumulate(changes)][: len(owners)], dtype="Int64")
    frame["disturbed"] = list(frontier["disturbed"])
    frame["concurrency"] = frame["concurrency"].astype("Int64")
    return frame[PARETO_COLUMNS]


def frontier_stretches(pareto: pd.DataFrame) -> pd.DataFrame:
    """Which series owns each stretch of the frontier, from which point to which."""
    rows = []
    for stretch, group in pareto.groupby("stretch", sort=True):
        rows.append(
            {
                "stretch": stretch,
                "series": group["series"].iloc[0],
                "points": ", ".join(group["point"]),
                "interactivity_from_tok_s": group["interactivity_tok_s"].iloc[0],
                "interactivity_to_tok_s": group["interactivity_tok_s"].iloc[-1],
                "decode_from_tok_s": group["decode_tok_s"].iloc[0],
                "decode_to_tok_s": group["decode_tok_s"].iloc[-1],
            }
        )
    columns = ["stretch", "series", "points", "interactivity_from_tok_s"]
    columns += ["interactivity_to_tok_s", "decode_from_tok_s", "decode_to_tok_s"]
    return pd.DataFrame(rows, columns=columns)


# --- the drafter at each point ------------------------------------------------------------


@dataclass(frozen=True)
class SeriesPair:
    """A drafter series and its base (drafter none, same model, engine, quant, workload and
    axis), when the base exists and has exactly the same points."""

    drafter: list[Cell]
    base: list[Cell] | None
    note: str = ""

    @property
    def series(self) -> str:
        return self.drafter[0].sweep.series


def _series_key(cell: Cell) -> tuple:
    return (cell.model, cell.engine, cell.quant, cell.sweep.workload, cell.sweep.axis)


def series_pairs(points: Sequence[Cell]) -> list[SeriesPair]:
    """Each drafter series with its base series; a base with other points pairs with nothing
    (a gain across unlike loads would read as a trend)."""
    by_series: dict[str, list[Cell]] = {}
    for cell in points:
        by_series.setdefault(cell.sweep.series, []).append(cell)
    bases = {
        _series_key(members[0]): members
        for members in by_series.values()
        if members[0].drafter == NO_DRAFTER
    }
    pairs = []
    for members in by_series.values():
        if members[0].drafter == NO_DRAFTER:
            continue
        base = bases.get(_series_key(members[0]))
        if base is None:
            pairs.append(SeriesPair(members, None, "no base series (drafter none)"))
        elif [c.sweep.value for c in base] != [c.sweep.value for c in members]:
            axis = members[0].sweep.axis
            labels = [
                ", ".join(point_label(axis, c.sweep.value) for c in s) for s in (base, members)
            ]
            note = f"the base series has other points ({labels[0]}; this series {labels[1]})"
            pairs.append(SeriesPair(members, None, note))
        else:
            pairs.append(SeriesPair(members, base))
    return pairs


def _drafted_accepted(record: RequestRecord) -> tuple[float, float] | None:
    """A completed request's drafted and accepted tokens, where its response said them
    (llama.cpp `timings`, SGLang `spec_tokens_details`)."""
    timings, details = record.timings or {}, record.spec_details or {}
    if "draft_n" in timings:
        return float(timings.get("draft_n") or 0), float(timings.get("draft_n_accepted") or 0)
    if details.get("spec_num_proposed_drafts") is not None:
        correct = details.get("spec_num_correct_drafts")
        if correct is not None:
            return float(details["spec_num_proposed_drafts"]), float(correct)
    return None


WILSON_Z = 1.959963984540054


def wilson_interval(successes: float, trials: float) -> tuple[float, float] | None:
    """Wilson's 95 % score interval of a binomial proportion."""
    if successes is None or not trials or trials <= 0:
        return None
    p, z2 = successes / trials, WILSON_Z**2
    center = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = WILSON_Z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials**2)) / (1 + z2 / trials)
    return max(0.0, center - half), min(1.0, center + half)


def ratio_interval(accepted: np.ndarray, drafted: np.ndarray) -> tuple[float, float] | None:
    """95 % interval of Σ accepted / Σ drafted over requests, each request one draw (a ratio
    estimator's delta-method variance, Σ (a_i − R d_i)² / (n (n − 1) d̄²)): drafts within a
    request go together, the requests are what varies."""
    n = len(drafted)
    if n < 2 or drafted.sum() <= 0:
        return None
    rate = accepted.sum() / drafted.sum()
    variance = ((accepted - rate * drafted) ** 2).sum() / (n * (n - 1) * drafted.mean() ** 2)
    half = t975(n - 1) * math.sqrt(variance)
    return rate - half, rate + half


def acceptance_interval(
    metrics: CellMetrics, records: Sequence[RequestRecord] | None
) -> tuple[float | None, float | None, str]:
    """The 95 % interval of a point's acceptance rate: from its repeats (≥ 3); else over its
    completed requests where each response gave its drafts (ratio_interval), as a share of the
    headline (the counters' figure, which may count a few tokens more); else Wilson's over the
    drafted tokens the counters give, which takes drafted tokens as independent (they are not:
    a rejection ends its draft), so it is too narrow and says so."""
    spec = metrics.get("spec") or {}
    rate = spec.get("acceptance_rate")
    repeats = metrics.get("repeats") or {}
    if repeats.get("done", 0) >= MIN_REPEATS:
        found = interval_from_repeats([f.get("acceptance_rate") for f in repeats["figures"]])
        if found is not None:
            return found.lo, found.hi, f"repeats, {repeats['done']} runs"
    pairs = [
        found
        for r in records or ()
        if r.status == OK and not r.warmup and (found := _drafted_accepted(r)) is not None
    ]
    if rate is not None and len(pairs) >= 2:
        drafted, accepted = (np.array(column) for column in zip(*pairs, strict=True))
        found = ratio_interval(accepted, drafted)
        whole = accepted.sum() / drafted.sum() if drafted.sum() else 0.0
        if found is not None and whole > 0:
            lo, hi = (max(0.0, min(1.0, end * rate / whole)) for end in found)
            return lo, hi, f"{len(pairs)} requests' drafts"
    counted = wilson_interval(spec.get("accepted_tokens"), spec.get("draft_tokens"))
    if rate is not None and counted is not None:
        return *counted, "Wilson over drafted tokens (too narrow: drafts are not independent)"
    return None, None, ""


def flag_acceptance(rows: list[dict[str, Any]]) -> None:
    """Mark the points of one series whose acceptance interval leaves out the median acceptance
    of the series' other points. Greedy decoding drafts and verifies the same tokens at any
    load, so acceptance should not move with it; when it does, read the point with care
    (batch-dependent numerics, another prompt set completed, a counter read at the wrong
    time)."""
    for i, row in enumerate(rows):
        others = [
            r["acceptance_rate"]
            for j, r in enumerate(rows)
            if j != i and not is_missing(r.get("acceptance_rate"))
        ]
        lo, hi = row.get("acceptance_rate_lo"), row.get("acceptance_rate_hi")
        if not others or is_missing(lo) or is_missing(hi):
            row["acceptance_differs"] = None
            continue
        typical = statistics.median(others)
        row["acceptance_differs"] = not lo <= typical <= hi
        if row["acceptance_differs"]:
            row["acceptance_note"] = (
                f"acceptance {row['acceptance_rate']:.3f} [{lo:.3f}, {hi:.3f}] here, "
                f"{typical:.3f} at the series' other points (median)"
            )


def _published(reference: Mapping[str, Any], keys: Sequence[str]) -> Any:
    found = [reference.get(key) for key in keys if not is_missing(reference.get(key))]
    return found[0] if found else None


def reference_columns(drafter: Cell, base: Cell) -> dict[str, Any]:
    """The pair's published figures beside the measured ones, and the gain they imply."""
    out = {}
    for column, which, keys in GAIN_REFERENCES:
        out[column] = _published((drafter if which == "drafter" else base).reference, keys)
    published_base, published = out["ref_base_decode_tok_s"], out["ref_decode_tok_s"]
    numbers = all(isinstance(v, (int, float)) for v in (published_base, published))
    gain = 100.0 * (published / published_base - 1) if numbers and published_base else None
    out["ref_decode_gain_pct"] = gain
    return out


def spec_gain_sweep_table(
    all_metrics: Sequence[CellMetrics],
    cells: Sequence[CellData],
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
) -> pd.DataFrame:
    """spec_gain_sweep.csv: each point of each drafter series whose base series has the same
    points, beside the base point: spec_gain's gain, interval and verdict (the spec gain
    table's own, on just these pairs), the TPOT change, and the acceptance at the point with
    its interval and whether it differs from the series' other points."""
    records = records or {}
    by_id = {m["cell"]: m for m in all_metrics}
    rows = []
    for pair in series_pairs(sweep_points(cells)):
        if pair.base is None:
            continue
        pair_ids = {c.id for c in (*pair.drafter, *pair.base)}
        ordered = [by_id.get(c.id) or _not_run(c) for c in (*pair.base, *pair.drafter)]
        gains = spec_gain_table(ordered, {k: v for k, v in records.items() if k in pair_ids})
        gain_by_cell = {row["drafter_cell"]: row for row in _records(gains)}
        series_rows = []
        for base, drafter in zip(pair.base, pair.drafter, strict=True):
            gain = gain_by_cell[drafter.id]
            metrics = by_id.get(drafter.id) or {}
            done = metrics.get("status") == Status.DONE
            lo, hi, source = (
                acceptance_interval(metrics, records.get(drafter.id)) if done else (None, None, "")
            )
            row = {
                "series": pair.series,
                "base_series": base.sweep.series,
                "axis": drafter.sweep.axis,
                "concurrency": drafter.concurrency,
                "request_rate": drafter.workload_spec.request_rate,
                "point": point_label(drafter.sweep.axis, drafter.sweep.value),
                **{k: gain.get(k) for k in SPEC_GAIN_SWEEP_COLUMNS if k in gain},
                "acceptance_rate": gain.get("acceptance_rate") if done else None,
                "acceptance_rate_lo": lo,
                "acceptance_rate_hi": hi,
                "acceptance_interval_source": source,
                "acceptance_length": gain.get("acceptance_length") if done else None,
                "acceptance_note": "",
                **reference_columns(drafter, base),
            }
            row[drafter.sweep.axis] = _axis_value(drafter)
            series_rows.append(row)
        flag_acceptance(series_rows)
        rows += series_rows
    frame = pd.DataFrame(rows, columns=SPEC_GAIN_SWEEP_COLUMNS)
    frame["concurrency"] = frame["concurrency"].astype("Int64")
    return frame


def _axis_value(cell: Cell) -> float:
    return int(cell.sweep.value) if cell.sweep.axis == CONCURRENCY else float(cell.sweep.value)


def _not_run(cell: Cell) -> dict[str, Any]:
    """A point with no metrics yet, as spec_gain pairs it: its identity, no figures."""
    return identity_from_cell(cell)


# --- where the drafter stops paying ------------------------------------------------------


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as dicts, a missing value as None (pandas gives NaN, which is truthy)."""
    return [
        {k: None if is_missing(v) else v for k, v in row.items()}
        for row in frame.to_dict("records")
    ]


def _joined(labels: Sequence[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def crossover_summary(verdicts: Sequence[tuple[str, str | None]]) -> str:
    """Plain words for a series' verdicts in load order, (point label, verdict or None)."""
    judged = [(label, v) for label, v in verdicts if v]
    missing = [label for label, v in verdicts if not v]
    faster = [label for label, v in judged if v == FASTER]
    slower = [label for label, v in judged if v != FASTER]
    if not judged:
        return NO_VERDICT
    if not slower:
        text = EVERY_POINT
    elif not faster:
        text = NEVER
    else:
        flags = [v == FASTER for _, v in judged]
        if flags == sorted(flags, reverse=True):  # every faster point before every other
            text = f"faster up to {faster[-1]}, not from {slower[0]}"
        else:
            text = f"faster at {_joined(faster)}, not at {_joined(slower)}: no single crossover"
    if missing:
        text += f"; no verdict at {_joined(missing)}"
    return text


def disturbed_note(labels: Sequence[str]) -> str:
    """What a crossover resting on disturbed points must say: which points."""
    if not labels:
        return ""
    verb = "rests" if len(labels) == 1 else "rest"
    return (
        f"; {_joined(list(labels))} {verb} on a disturbed measurement (other work on the "
        "machine during the bench): read with care, or measure again (checks.rerun_disturbed)"
    )


def crossover_row(series: str, base_series: str | None, axis: str, gains: pd.DataFrame) -> dict:
    """One drafter series' crossover from its spec_gain_sweep rows (in load order): the last
    point it is faster at and the first it is not (points without a verdict are skipped), with
    the gain and interval each rests on. Every judged point shapes the answer, so a judged
    point whose pair is disturbed is named (`rests_on_disturbed`, and in the summary)."""
    rows = _records(gains)
    judged = [r for r in rows if r.get("verdict")]
    shaky = [r["point"] for r in judged if r.get("disturbed")]
    faster = [r for r in judged if r["verdict"] == FASTER]
    not_faster = [r for r in judged if r["verdict"] != FASTER]
    last, first = (faster[-1] if faster else None), (not_faster[0] if not_faster else None)
    flags = [r["verdict"] == FASTER for r in judged]
    out = {
        "series": series,
        "base_series": base_series,
        "axis": axis,
        "last_faster": last[axis] if last else None,
        "first_not_faster": first[axis] if first else None,
        "summary": crossover_summary([(r["point"], r.get("verdict")) for r in rows])
        + disturbed_note(shaky),
        "monotone": flags == sorted(flags, reverse=True) if judged else None,
        "first_not_faster_verdict": first["verdict"] if first else None,
        "interval_source": "; ".join(
            sorted(
                {
                    r["gain_interval_source"]
                    for r in (last, first)
                    if r and r.get("gain_interval_source")
                }
            )
        ),
        "points": ", ".join(r["point"] for r in rows),
        "rests_on_disturbed": ", ".join(shaky),
    }
    for name, row in (("last_faster", last), ("first_not_faster", first)):
        for suffix in ("", "_lo", "_hi"):
            out[f"{name}_gain{suffix}_pct"] = row.get(f"decode_gain{suffix}_pct") if row else None
    return out


def crossover_table(cells: Sequence[CellData], spec_gain_sweep: pd.DataFrame) -> pd.DataFrame:
    """spec_crossover.csv: one row per drafter series, those without a base series with the
    same points too (saying so)."""
    rows = []
    for pair in series_pairs(sweep_points(cells)):
        axis = pair.drafter[0].sweep.axis
        if pair.base is None:
            rows.append(
                {
                    "series": pair.series,
                    "axis": axis,
                    "summary": f"{NO_BASE}: {pair.note}",
                    "points": ", ".join(point_label(axis, c.sweep.value) for c in pair.drafter),
                }
            )
            continue
        gains = spec_gain_sweep[spec_gain_sweep["series"] == pair.series]
        rows.append(crossover_row(pair.series, pair.base[0].sweep.series, axis, gains))
    frame = pd.DataFrame(rows, columns=CROSSOVER_COLUMNS)
    for column in ("last_faster", "first_not_faster"):  # a concurrency stays an integer
        frame[column] = pd.Series([row.get(column) for row in rows], dtype=object)
    return frame


# --- the series, in words -----------------------------------------------------------------


def series_sections(
    sweeps: pd.DataFrame, pareto: pd.DataFrame, crossover: pd.DataFrame
) -> list[tuple[str, list[str]]]:
    """A short card per series: its points and how they ended, the server starts they ran on,
    where throughput and interactivity peak, the frontier stretches it owns, and (a drafter
    series) where the drafter stops paying."""
    stretches = frontier_stretches(pareto)
    by_series = crossover.set_index("series")["summary"].to_dict() if len(crossover) else {}
    out = []
    for series, group in sweeps.groupby("series", sort=False):
        done = group[group["status"] == Status.DONE]
        lines = [
            f"Points ({group['axis'].iloc[0]}): "
            + ", ".join(f"{p} {s}" for p, s in zip(group["point"], group["status"], strict=True))
        ]
        starts = [s for s in dict.fromkeys(group["server_start"]) if not is_missing(s)]
        if starts:
            lines.append(f"Server starts: {len(starts)} ({', '.join(map(str, starts))})")
        else:
            lines.append("Server starts: none recorded (a point on a server of its own has none)")
        for figure, label, unit in (
            ("decode_tok_s", "Highest decode throughput", "tok/s"),
            ("interactivity_tok_s", "Highest interactivity", "tok/s per user"),
        ):
            values = done[figure].map(lambda v: -math.inf if is_missing(v) else v)
            if len(values) and values.max() > -math.inf:
                best = done.loc[values.idxmax()]
                lines.append(f"{label}: {number_text(best[figure])} {unit} at {best['point']}")
        owned = stretches[stretches["series"] == series]
        if len(owned):
            lines.append(
                "On the frontier: "
                + "; ".join(f"stretch {r.stretch} ({r.points})" for r in owned.itertuples())
            )
        else:
            lines.append("On the frontier: no point")
        shaky = [p for p, d in zip(group["point"], group["disturbed"], strict=True) if d is True]
        if shaky:
            lines.append(
                f"Disturbed (other work on the machine during the bench): {', '.join(shaky)}"
            )
        failed = group[group["status"] != Status.DONE]
        for row in failed.itertuples():
            lines.append(f"{row.point}: {row.status}" + (f" ({row.reason})" if row.reason else ""))
        if series in by_series:
            lines.append(f"Speculative decoding against its base: {by_series[series]}")
        out.append((series, lines))
    return out


@dataclass(frozen=True)
class SweepTables:
    sweeps: pd.DataFrame
    pareto: pd.DataFrame
    spec_gain_sweep: pd.DataFrame
    spec_crossover: pd.DataFrame


def sweep_tables(
    all_metrics: Sequence[CellMetrics],
    cells: Sequence[CellData],
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
    gpus: Mapping[str, int | None] | None = None,
) -> SweepTables:
    """Every sweep table from the collapsed metrics, the config's repeat-1 cells and the first
    finished repeat's records (repeats.collapse_repeats)."""
    sweeps = sweep_table(all_metrics, cells, records, gpus)
    gains = spec_gain_sweep_table(all_metrics, cells, records)
    return SweepTables(sweeps, pareto_table(sweeps), gains, crossover_table(cells, gains))


def reference_note(gains: pd.DataFrame) -> str:
    """Say that published figures sit beside the measured ones, when any point has them."""
    columns = [c for c in gains.columns if c.startswith(REF_PREFIX)]
    if not columns or gains[columns].map(is_missing).all().all():
        return ""
    return "`ref_*`: published figures attached to the cells in the config, never measured here."
