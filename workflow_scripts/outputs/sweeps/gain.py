"""spec_gain_sweep.csv: each point of a drafter series beside the same point of its base series
(the spec gain table's gain, interval and verdict on just these pairs), the acceptance at the
point with its interval, and the published figures beside the measured ones."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...fidelity.series import SeriesVerdict
from ...loadgen.records import OK, RequestRecord
from ...verdicts.bounds import wilson_interval
from ...verdicts.families import LEVEL, holm
from ...vocabulary import NO_DRAFTER, Cell, CellMetrics, Status, point_part, point_value
from ..compact import REF_PREFIX, is_missing
from ..energy.change import ENERGY_CHANGE_COLUMNS
from ..spec_gain import spec_gain_table
from ..stats import MIN_REPEATS, Z975, interval_from_repeats, ratio_interval, t975, t_two_sided_p
from ..tables import identity_from_cell
from .points import sweep_points

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
    "verdict",  # Holm's over the series' points (spec_gain.GAIN_KEYS)
    "outputs",  # the drafter's greedy outputs against its base's, Holm's over the points too
    "tpot_change_pct",
    "tpot_change_lo_pct",
    "tpot_change_hi_pct",
    "acceptance_rate",
    "acceptance_rate_lo",
    "acceptance_rate_hi",
    "acceptance_interval_source",
    "acceptance_length",
    "acceptance_differs",  # Holm's over the series' points (flag_acceptance)
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
    # the gain's test: the point's own p-value and verdict, Holm's adjusted p-value, the family
    "p_value",
    "p_adjusted",
    "verdict_unadjusted",
    "family",
    # the outputs' test likewise (fidelity.series), and the series' pooled verdict over its points
    "outputs_p_value",
    "outputs_p_adjusted",
    "outputs_unadjusted",
    "outputs_pooled",
    "outputs_pooled_p_value",
    "outputs_pooled_reason",
    "outputs_note",  # where the points disagree with the pooled verdict
    "acceptance_p_value",  # the acceptance's test against the series' other points
    "acceptance_p_adjusted",
    # the drafter's energy change per output token at the point, Holm's over the series' points
    *ENERGY_CHANGE_COLUMNS,
]


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
                ", ".join(point_part("", axis, c.sweep.value) for c in s) for s in (base, members)
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


@dataclass(frozen=True)
class AcceptanceBounds:
    """A point's acceptance interval, where it comes from, and the degrees of freedom of the
    pivot it rests on (infinite: a normal's), which its test's p-value needs."""

    lo: float | None
    hi: float | None
    source: str
    df: float = math.inf


def acceptance_interval(
    metrics: CellMetrics, records: Sequence[RequestRecord] | None
) -> tuple[float | None, float | None, str]:
    """The 95 % interval of a point's acceptance rate and its source (`acceptance_bounds`)."""
    found = acceptance_bounds(metrics, records)
    return found.lo, found.hi, found.source


def acceptance_bounds(
    metrics: CellMetrics, records: Sequence[RequestRecord] | None
) -> AcceptanceBounds:
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
            return AcceptanceBounds(
                found.lo, found.hi, f"repeats, {repeats['done']} runs", found.n - 1
            )
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
            return AcceptanceBounds(lo, hi, f"{len(pairs)} requests' drafts", len(pairs) - 1)
    counted = wilson_interval(spec.get("accepted_tokens"), spec.get("draft_tokens"))
    if rate is not None and counted is not None:
        why = "Wilson over drafted tokens (too narrow: drafts are not independent)"
        return AcceptanceBounds(*counted, why)
    return AcceptanceBounds(None, None, "")


def acceptance_p_value(rate: float, lo: float, hi: float, df: float, typical: float) -> float:
    """The two-sided p-value that the point's acceptance is `typical`, from its 95 % interval
    read as a t pivot (a normal's for infinite df) with the half-width on `typical`'s side:
    below 5 % exactly when the interval leaves `typical` out."""
    half = (hi if typical > rate else lo) - rate
    if typical == rate:
        return 1.0
    if half == 0:
        return 0.0
    quantile = t975(int(df)) if math.isfinite(df) else Z975
    return t_two_sided_p(quantile * (typical - rate) / half, df)


def flag_acceptance(rows: list[dict[str, Any]]) -> None:
    """Mark the points of one series whose acceptance leaves out the median acceptance of the
    series' other points, as one family: each point's p-value (`acceptance_p_value`) adjusted
    by Holm's step-down over the series' points, `acceptance_differs` where the adjusted one is
    below LEVEL. Greedy decoding drafts and verifies the same tokens at any load, so acceptance
    should not move with it; when it does, read the point with care (batch-dependent
    numerics, another prompt set completed, a counter read at the wrong time)."""
    typical: list[float | None] = []
    for i, row in enumerate(rows):
        others = [
            r["acceptance_rate"]
            for j, r in enumerate(rows)
            if j != i and not is_missing(r.get("acceptance_rate"))
        ]
        lo, hi = row.get("acceptance_rate_lo"), row.get("acceptance_rate_hi")
        if not others or is_missing(lo) or is_missing(hi):
            typical.append(None)
            continue
        typical.append(statistics.median(others))
        row["acceptance_p_value"] = acceptance_p_value(
            row["acceptance_rate"], lo, hi, row.get("acceptance_df", math.inf), typical[-1]
        )
    adjusted = holm([row.get("acceptance_p_value") for row in rows])
    for row, median, p in zip(rows, typical, adjusted, strict=True):
        row["acceptance_p_adjusted"] = p
        row["acceptance_differs"] = None if p is None else p < LEVEL
        if p is None or row["acceptance_p_value"] >= LEVEL:
            continue
        lo, hi = row["acceptance_rate_lo"], row["acceptance_rate_hi"]
        row["acceptance_note"] = (
            f"acceptance {row['acceptance_rate']:.3f} [{lo:.3f}, {hi:.3f}] here, "
            f"{median:.3f} at the series' other points (median)"
        )
        if not row["acceptance_differs"]:
            row["acceptance_note"] += (
                f": outside on its own, not as one of the series' points (Holm p = {p:.2g})"
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
    cells: Sequence[Cell],
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
    outputs: Mapping[str, str] | None = None,
    series_outputs: Mapping[str, SeriesVerdict] | None = None,
) -> pd.DataFrame:
    """spec_gain_sweep.csv: each point of each drafter series whose base series has the same
    points, beside the base point: spec_gain's gain, interval, verdict and outputs verdict
    (the spec gain table's own, on just these pairs: each judged as one of the series' points),
    the TPOT change, the acceptance at the point with its interval and whether it differs from
    the series' other points, and the series' outputs judged as a family (`series_outputs`, by
    drafter series: fidelity.series.SeriesVerdict) with its pooled verdict."""
    records, series_outputs = records or {}, series_outputs or {}
    by_id = {m["cell"]: m for m in all_metrics}
    rows = []
    for pair in series_pairs(sweep_points(cells)):
        if pair.base is None:
            continue
        pair_ids = {c.id for c in (*pair.drafter, *pair.base)}
        ordered = [by_id.get(c.id) or _not_run(c) for c in (*pair.base, *pair.drafter)]
        gains = spec_gain_table(
            ordered, {k: v for k, v in records.items() if k in pair_ids}, outputs
        )
        gain_by_cell = {row["drafter_cell"]: row for row in frame_records(gains)}
        series_rows = []
        for base, drafter in zip(pair.base, pair.drafter, strict=True):
            gain = gain_by_cell[drafter.id]
            metrics = by_id.get(drafter.id) or {}
            done = metrics.get("status") == Status.DONE
            bounds = (
                acceptance_bounds(metrics, records.get(drafter.id))
                if done
                else AcceptanceBounds(None, None, "")
            )
            row = {
                "series": pair.series,
                "base_series": base.sweep.series,
                "axis": drafter.sweep.axis,
                "concurrency": drafter.concurrency,
                "request_rate": drafter.workload_spec.request_rate,
                "point": point_part("", drafter.sweep.axis, drafter.sweep.value),
                **{k: gain.get(k) for k in SPEC_GAIN_SWEEP_COLUMNS if k in gain},
                "acceptance_rate": gain.get("acceptance_rate") if done else None,
                "acceptance_rate_lo": bounds.lo,
                "acceptance_rate_hi": bounds.hi,
                "acceptance_interval_source": bounds.source,
                "acceptance_df": bounds.df,  # for its test; not a column
                "acceptance_length": gain.get("acceptance_length") if done else None,
                "acceptance_note": "",
                **reference_columns(drafter, base),
            }
            row[drafter.sweep.axis] = point_value(drafter.sweep.axis, drafter.sweep.value)
            row.update(outputs_columns(series_outputs.get(pair.series), drafter.id))
            series_rows.append(row)
        flag_acceptance(series_rows)
        rows += series_rows
    frame = pd.DataFrame(rows, columns=SPEC_GAIN_SWEEP_COLUMNS)
    frame["concurrency"] = frame["concurrency"].astype("Int64")
    return frame


def outputs_columns(series: SeriesVerdict | None, cell: str) -> dict[str, Any]:
    """A drafter point's outputs test, alone and as one of its series' points, and the series'
    pooled verdict (None: its outputs were not compared)."""
    point = series.point(cell) if series else None
    if point is None:
        return {}
    return {
        "outputs_p_value": point.alone.p_value,
        "outputs_p_adjusted": point.p_adjusted,
        "outputs_unadjusted": point.alone.verdict,
        "outputs_pooled": series.verdict,
        "outputs_pooled_p_value": series.p_value,
        "outputs_pooled_reason": series.reason,
        "outputs_note": series.note,
    }


def _not_run(cell: Cell) -> dict[str, Any]:
    """A point with no metrics yet, as spec_gain pairs it: its identity, no figures."""
    return identity_from_cell(cell)


def frame_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as dicts, a missing value as None (pandas gives NaN, which is truthy)."""
    return [
        {k: None if is_missing(v) else v for k, v in row.items()}
        for row in frame.to_dict("records")
    ]


def reference_note(gains: pd.DataFrame) -> str:
    """Say that published figures sit beside the measured ones, when any point has them."""
    columns = [c for c in gains.columns if c.startswith(REF_PREFIX)]
    if not columns or gains[columns].map(is_missing).all().all():
        return ""
    return "`ref_*`: published figures attached to the cells in the config, never measured here."
