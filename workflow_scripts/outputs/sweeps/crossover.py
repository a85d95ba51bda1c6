"""spec_crossover.csv: where along the load a drafter stops paying, one row per drafter series,
from its spec_gain_sweep rows: their verdicts as one family (Holm's over the series' points),
and the series' outputs in one pooled verdict."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ...process.machine_use import disturbed_note
from ...verdicts.families import verdict_text
from ...vocabulary import Cell, point_part
from ..changes import FASTER, SLOWER
from ..energy.crossover import ENERGY_CROSSOVER_COLUMNS, energy_crossover
from ..spec_gain import RANDOM_TOKENS_FLAG
from .gain import frame_records, series_pairs
from .points import sweep_points

CROSSOVER_COLUMNS = [
    "series",
    "base_series",
    "axis",
    "last_faster",
    "first_not_faster",
    "summary",
    "outputs",  # the drafter's greedy outputs against its base's across the points
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
    "family",  # the family the verdicts were judged in (Holm over the series' points at 5 %)
    "outputs_verdict",  # the series' outputs, pooled over its points (exact stratified test)
    "outputs_p_value",
    "outputs_note",  # where the points disagree with it, and points changed on their own only
    # where it stops saving energy, and the sentence that holds it against where it stops
    # being faster (outputs.energy.crossover)
    *ENERGY_CROSSOVER_COLUMNS,
]

EVERY_POINT, NEVER = "faster at every point", "never faster"
NO_BASE = "no base series with the same points"
NO_VERDICT = "no verdict at any point"


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


def outputs_summary(points: Sequence[tuple[str, str | None]]) -> str:
    """The drafter's outputs verdicts across a series (outputs.fidelity.compared), in a few words:
    `unchanged` at every point, else each other verdict with its points (`changed at c4, c8`)."""
    verdicts = {v for _, v in points if v}
    if not verdicts:
        return ""
    if verdicts == {"unchanged"}:
        return "unchanged at every point"
    parts = []
    for shown in ("changed", "unresolved", "no verdict", "not recorded"):
        where = [p for p, v in points if v == shown]
        if where:
            parts.append(f"{shown} at {_joined(where)}")
    return "; ".join(parts)


def alone_note(rows: Sequence[dict]) -> str:
    """The points that read faster or slower on their own but not as one of the series'
    points: what the crossover would have said point by point."""
    moved = [
        f"{r['point']} {r['verdict_unadjusted']} on its own (p = {r['p_value']:.2g}, Holm p = "
        f"{r['p_adjusted']:.2g})"
        for r in rows
        if r.get("verdict_unadjusted") in (FASTER, SLOWER)
        and r.get("verdict") != r.get("verdict_unadjusted")
        and r.get("p_value") is not None
        and r.get("p_adjusted") is not None
    ]
    return f"; {_joined(moved)}, not as one of the series' points" if moved else ""


def series_outputs(rows: Sequence[dict]) -> dict:
    """The series' outputs in words (each point's family verdict, then the pooled one) and the
    pooled verdict's columns, from the spec_gain_sweep rows (every row of a series holds it)."""
    per_point = outputs_summary([(r["point"], r.get("outputs")) for r in rows])
    pooled = next((r for r in rows if r.get("outputs_pooled")), None)
    if pooled is None:
        return {"outputs": per_point}
    said = verdict_text(pooled["outputs_pooled"], pooled.get("outputs_pooled_p_value"))
    note = pooled.get("outputs_note") or ""
    return {
        "outputs": "; ".join(x for x in (per_point, f"pooled over the points: {said}", note) if x),
        "outputs_verdict": pooled["outputs_pooled"],
        "outputs_p_value": pooled.get("outputs_pooled_p_value"),
        "outputs_note": "; ".join(x for x in (pooled.get("outputs_pooled_reason"), note) if x),
    }


def random_tokens_note(rows: Sequence[dict]) -> str:
    """The label a series on random tokens carries (spec_gain's flag on its points)."""
    flagged = any(RANDOM_TOKENS_FLAG in (r.get("flags") or "") for r in rows)
    return f"; {RANDOM_TOKENS_FLAG}" if flagged else ""


def crossover_row(series: str, base_series: str | None, axis: str, gains: pd.DataFrame) -> dict:
    """One drafter series' crossover from its spec_gain_sweep rows (in load order): the last
    point it is faster at and the first it is not (points without a verdict are skipped), with
    the gain and interval each rests on. The verdicts are the family's (Holm's over the series'
    points: spec_gain.GAIN_KEYS); a point faster or slower on its own only is named in the
    summary. Every judged point shapes the answer, so a judged point whose pair is disturbed is
    named (`rests_on_disturbed`, and in the summary)."""
    rows = frame_records(gains)
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
        + alone_note(rows)
        + disturbed_note(shaky)
        + random_tokens_note(rows),
        **series_outputs(rows),
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
        "family": next((r["family"] for r in judged if r.get("family")), None),
        **energy_crossover(rows, axis),
    }
    for name, row in (("last_faster", last), ("first_not_faster", first)):
        for suffix in ("", "_lo", "_hi"):
            out[f"{name}_gain{suffix}_pct"] = row.get(f"decode_gain{suffix}_pct") if row else None
    return out


def crossover_table(cells: Sequence[Cell], spec_gain_sweep: pd.DataFrame) -> pd.DataFrame:
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
                    "points": ", ".join(point_part("", axis, c.sweep.value) for c in pair.drafter),
                }
            )
            continue
        gains = spec_gain_sweep[spec_gain_sweep["series"] == pair.series]
        rows.append(crossover_row(pair.series, pair.base[0].sweep.series, axis, gains))
    frame = pd.DataFrame(rows, columns=CROSSOVER_COLUMNS)
    for column in (
        "last_faster",
        "first_not_faster",
        "last_saves_energy",
        "first_not_saving_energy",
    ):  # a concurrency stays an integer
        frame[column] = pd.Series([row.get(column) for row in rows], dtype=object)
    return frame
