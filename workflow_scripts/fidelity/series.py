"""A series' fidelity verdicts as a family: each point's pair judged against its own floor
(`agreement.judge_pair`, a Fisher test at ALPHA), then

- per point, the family verdict: the points' p-values adjusted by Holm's step-down across the
  series (`verdicts.families.holm`), so a series whose outputs do not change reads `changed`
  at some point in at most ALPHA of runs, however many points it has;
- for the series, one pooled verdict: the exact stratified test over its points
  (`verdicts.families.stratified_lower_p`), each point a stratum holding the pair against its
  floor, so evidence spread thinly over the points adds up and no one point decides alone;
- a note where the points and the pooled verdict disagree, and where a point was below its
  floor on its own but not as one of the family.

A point outside a series is a family of one: its verdict is its test's. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..verdicts.families import (
    Stratum,
    family_text,
    holm,
    smallest_stratified_p,
    stratified_lower_p,
)
from ..vocabulary import Cell, point_part
from .agreement import ALPHA, CHANGED, UNCHANGED, UNRESOLVED, Agreement, PairVerdict, judge_pair
from .pairs import FLOOR, Pair


@dataclass(frozen=True)
class SeriesPoint:
    """One point of a series: its cell id, its name (`c8`), its pair's agreement and the floor
    of its reference (None: not measured)."""

    cell: str
    label: str
    agreement: Agreement
    floor: Agreement | None


@dataclass(frozen=True)
class PointVerdict:
    """A point's verdict as one of its series (`verdict`, `reason`) beside its own test's
    (`alone`), and the Holm-adjusted p-value (None where no test ran)."""

    cell: str
    label: str
    alone: PairVerdict
    p_adjusted: float | None
    verdict: str
    reason: str


@dataclass(frozen=True)
class SeriesVerdict:
    """A series' points judged as a family, and its pooled verdict with the stratified test's
    p-value; `family` names the family (`Holm over 4 points of the series at 5 %`), `note` says
    where the points disagree ("" where they do not)."""

    points: tuple[PointVerdict, ...]
    family: str
    verdict: str
    p_value: float | None
    reason: str
    note: str
    series: str = ""  # the series' name (its cell ids without the point)

    def to_dict(self) -> dict[str, Any]:
        """As a series' family file holds it (outputs/fidelity/family.py)."""
        return {
            "series": self.series,
            "family": self.family,
            "verdict": self.verdict,
            "p_value": self.p_value,
            "reason": self.reason,
            "note": self.note,
            "points": [
                {
                    "cell": p.cell,
                    "label": p.label,
                    "alone": {
                        "verdict": p.alone.verdict,
                        "reason": p.alone.reason,
                        "p_value": p.alone.p_value,
                    },
                    "p_adjusted": p.p_adjusted,
                    "verdict": p.verdict,
                    "reason": p.reason,
                }
                for p in self.points
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SeriesVerdict:
        points = tuple(
            PointVerdict(
                p["cell"],
                p["label"],
                PairVerdict(**p["alone"]),
                p["p_adjusted"],
                p["verdict"],
                p["reason"],
            )
            for p in data["points"]
        )
        fields = ("family", "verdict", "p_value", "reason", "note", "series")
        return cls(points, *(data[key] for key in fields))

    def point(self, cell: str) -> PointVerdict | None:
        return next((p for p in self.points if p.cell == cell), None)


def _joined(labels: Sequence[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def family_verdicts(points: Sequence[SeriesPoint], level: float = ALPHA) -> list[PointVerdict]:
    """Each point's verdict as one of these points: Holm's adjusted p-value at `level` where
    its test ran, its own verdict (no floor, too few prompts, not recorded) where none did."""
    alone = [judge_pair(p.agreement, p.floor) for p in points]
    adjusted = holm([v.p_value for v in alone])
    tested = sum(v.p_value is not None for v in alone)
    out = []
    for point, own, p in zip(points, alone, adjusted, strict=True):
        verdict, reason = own.verdict, own.reason
        if p is not None and tested > 1:
            verdict = CHANGED if p < level else UNCHANGED
            if verdict == own.verdict:
                reason = f"{own.reason}; Holm p = {p:.2g} over {tested} points"
            else:
                reason = f"{own.reason}, but not as one of {tested} points (Holm p = {p:.2g})"
        out.append(PointVerdict(point.cell, point.label, own, p, verdict, reason))
    return out


def pooled_verdict(
    points: Sequence[SeriesPoint], level: float = ALPHA
) -> tuple[str, float | None, str]:
    """The series' one verdict, its p-value and reason: the exact stratified test over the
    points that have a floor and compared prompts; without any, `unchanged` only when every
    compared output is identical."""
    recorded = [p for p in points if p.agreement.recorded and p.agreement.prompts_compared]
    strata_points = [p for p in recorded if p.floor is not None and p.floor.prompts_compared]
    if not recorded:
        return UNRESOLVED, None, "no point's outputs compared"
    if not strata_points:
        if all(p.agreement.identical == p.agreement.prompts_compared for p in recorded):
            return UNCHANGED, None, "every compared output identical (no floor measured)"
        return UNRESOLVED, None, "outputs differ and no floor was measured to tell them from noise"
    strata = [
        Stratum(
            p.agreement.identical,
            p.agreement.prompts_compared,
            p.floor.identical,
            p.floor.prompts_compared,
        )
        for p in strata_points
    ]
    pair = f"{sum(s.successes for s in strata)}/{sum(s.trials for s in strata)}"
    floor = f"{sum(s.control_successes for s in strata)}/{sum(s.control_trials for s in strata)}"
    against = f"{pair} identical vs floor {floor} over {len(strata)} points"
    kept = {id(p) for p in strata_points}
    left_out = [p.label for p in points if id(p) not in kept]
    if left_out:
        against += f" ({_joined(left_out)} left out: no floor or nothing compared)"
    if smallest_stratified_p(strata) >= level:
        return UNRESOLVED, None, f"{against}: too few prompts to tell"
    p = stratified_lower_p(strata)
    verdict = CHANGED if p < level else UNCHANGED
    words = "below the floor" if verdict == CHANGED else "not detectably below"
    return verdict, p, f"{against}: {words} (exact stratified p = {p:.2g})"


def disagreement(verdict: str, points: Sequence[PointVerdict]) -> str:
    """Where the points' family verdicts differ from the pooled one, and which points were
    `changed` on their own but not as one of the family; "" where nothing is to be said."""
    parts = []
    judged = [p for p in points if p.verdict in (CHANGED, UNCHANGED)]
    if verdict in (CHANGED, UNCHANGED) and any(p.verdict != verdict for p in judged):
        changed = [p.label for p in judged if p.verdict == CHANGED]
        unchanged = [p.label for p in judged if p.verdict == UNCHANGED]
        if verdict == UNCHANGED:
            parts.append(f"points disagree: changed at {_joined(changed)} only")
        else:
            parts.append(f"points disagree: not detectably changed at {_joined(unchanged)}")
    alone = [p for p in points if p.alone.verdict == CHANGED and p.verdict != CHANGED]
    if alone:
        said = [
            f"{p.label} (p = {p.alone.p_value:.2g}, Holm p = {p.p_adjusted:.2g})" for p in alone
        ]
        parts.append(
            f"below the floor on its own at {_joined(said)}, not as one of the series' points"
        )
    return "; ".join(parts)


def judge_series(
    points: Sequence[SeriesPoint], level: float = ALPHA, series: str = ""
) -> SeriesVerdict:
    """The points of one series (its drafter's, or a quant's, each against its own reference
    point) judged as a family and pooled."""
    judged = family_verdicts(points, level)
    verdict, p, reason = pooled_verdict(points, level)
    tested = sum(v.p_adjusted is not None for v in judged)
    note = disagreement(verdict, judged)
    return SeriesVerdict(
        tuple(judged), family_text(tested, level), verdict, p, reason, note, series
    )


def judge_families(
    pairs: Sequence[tuple[Pair, Agreement, Agreement | None]], cells: Sequence[Cell]
) -> list[tuple[PointVerdict, SeriesVerdict | None] | None]:
    """Each pair (with its agreement and its reference's floor) as one of its family: a sweep
    series' pairs of one kind (a drafter's points against its base's, a quant's against the
    reference's) judged together, with the series' pooled verdict; any other pair alone (no
    series verdict); a floor pair not judged (None)."""
    by_id = {cell.id: cell for cell in cells}
    families: dict[tuple[str, str], list[int]] = {}
    for i, (pair, _, _) in enumerate(pairs):
        if pair.kind != FLOOR:
            sweep = by_id[pair.cell].sweep
            families.setdefault((sweep.series if sweep else pair.cell, pair.kind), []).append(i)
    out: list[tuple[PointVerdict, SeriesVerdict | None] | None] = [None] * len(pairs)
    for (series, _), members in families.items():
        points = []
        for i in members:
            pair, agreement, floor = pairs[i]
            sweep = by_id[pair.cell].sweep
            label = point_part("", sweep.axis, sweep.value) if sweep else pair.cell
            points.append(SeriesPoint(pair.cell, label, agreement, floor))
        judged = judge_series(points, series=series)
        in_series = by_id[pairs[members[0]][0].cell].sweep is not None
        for i, point in zip(members, judged.points, strict=True):
            out[i] = (point, judged if in_series else None)
    return out


def family_columns(point: PointVerdict, series: SeriesVerdict | None) -> dict[str, Any]:
    """A pair's test alone and in its family, for a table row (a sweep point's: its series'
    points, and the series' pooled verdict)."""
    out: dict[str, Any] = {
        "p_value": point.alone.p_value,
        "p_adjusted": point.p_adjusted,
        "verdict_unadjusted": point.alone.verdict,
        "family": series.family if series else family_text(1),
    }
    if series is not None:
        out.update(
            series=series.series,
            series_verdict=series.verdict,
            series_p_value=series.p_value,
            series_note="; ".join(x for x in (series.reason, series.note) if x),
        )
    return out
