"""Output fidelity's pairs judged, once for every reader: each compared cell against its
reference (fidelity.pairs) by the one judgement of a pair (fidelity.judgement), a sweep series'
pairs of one kind as a family (fidelity.series). The fidelity table reads them (`table`), and
so do the drafter's flags wherever its gain is shown (`drafter_outputs`: spec_gain,
spec_gain_sweep, spec_crossover), a sweep point's as one of its series' points, with the
series' pooled verdict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...fidelity.agreement import NO_VERDICT, Agreement, compare_outputs
from ...fidelity.judgement import Run, judge_runs
from ...fidelity.pairs import DRAFTER, FLOOR, Pair, fidelity_pairs, floor_id
from ...fidelity.series import PointVerdict, SeriesVerdict, judge_families
from ...vocabulary import Cell

NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class Compared:
    """One pair's agreement (None: not compared, a run did not finish), its reference's floor
    (None: no floor run, or not usable) and the verdict (fidelity.judgement); a sweep point's
    pair as one of its series' points too (`point`, `series`: the family's verdicts, which
    `verdict` and `reason` then are)."""

    pair: Pair
    agreement: Agreement | None
    floor: Agreement | None
    verdict: str
    reason: str
    point: PointVerdict | None = None
    series: SeriesVerdict | None = None

    @property
    def evidence(self) -> Agreement | None:
        """The agreement a goal may judge: None where the pair has no verdict."""
        return None if self.verdict == NO_VERDICT else self.agreement


def cell_runs(
    all_metrics: Sequence[Mapping[str, Any]], records: Mapping[str, Sequence[Any]]
) -> dict[str, Run]:
    """Each cell with records, as a judgement reads it: its status and reason beside them."""
    return {m["cell"]: Run.of(m, records[m["cell"]]) for m in all_metrics if m["cell"] in records}


def compared_pairs(
    cells: Sequence[Cell], runs: Mapping[str, Run], references: Mapping[str, str]
) -> list[Compared]:
    """Every pair whose cell finished, judged (fidelity.judgement.judge_runs: a reference or
    floor run that did not finish gives no verdict); a floor pair's floor is itself; a sweep
    series' pairs of one kind that have a verdict judged as a family
    (fidelity.series.judge_families)."""
    out = []
    for pair in fidelity_pairs(cells, references):
        cell, reference = runs.get(pair.cell), runs.get(pair.reference_cell)
        if cell is None or reference is None or not cell.finished:
            continue  # not run, or failed: the summary says why
        if pair.kind == FLOOR:  # the floor itself: no verdict of its own
            if reference.finished:
                agreement = compare_outputs(cell.records, reference.records)
                out.append(Compared(pair, agreement, agreement, "", ""))
            continue
        judged = judge_runs(cell, reference, runs.get(floor_id(pair.reference_cell)))
        out.append(Compared(pair, judged.agreement, judged.floor, judged.verdict, judged.reason))
    judged_pairs = [i for i, c in enumerate(out) if c.verdict != NO_VERDICT]
    found = judge_families(
        [(out[i].pair, out[i].agreement, out[i].floor) for i in judged_pairs], cells
    )
    for i, family in zip(judged_pairs, found, strict=True):
        if family is not None:  # a floor's is None
            point, series = family
            out[i] = replace(
                out[i], verdict=point.verdict, reason=point.reason, point=point, series=series
            )
    return out


@dataclass(frozen=True)
class DrafterOutputs:
    """Each drafter cell's outputs verdict against its base (`unchanged`, `changed`,
    `unresolved`; `not recorded` without outputs), a sweep point's as one of its series'
    points; and each drafter sweep series judged as a family, with its pooled verdict."""

    by_cell: dict[str, str]
    by_series: dict[str, SeriesVerdict]


def drafter_outputs(
    cells: Sequence[Cell],
    records: Mapping[str, Sequence[Any]],
    all_metrics: Sequence[Mapping[str, Any]],
) -> DrafterOutputs:
    """What spec_gain, spec_gain_sweep, spec_crossover and the cards show beside the gain."""
    runs = cell_runs(all_metrics, records)
    compared = [
        c
        for c in compared_pairs(cells, runs, {})  # a drafter's base needs no reference quant
        if c.pair.kind == DRAFTER
    ]
    return DrafterOutputs(
        {c.pair.cell: NOT_RECORDED if not_recorded(c) else c.verdict for c in compared},
        {c.series.series: c.series for c in compared if c.series is not None},
    )


def drafter_output_verdicts(
    cells: Sequence[Cell],
    records: Mapping[str, Sequence[Any]],
    all_metrics: Sequence[Mapping[str, Any]],
) -> dict[str, str]:
    """Each drafter cell -> its outputs' verdict against its base (`drafter_outputs`)."""
    return drafter_outputs(cells, records, all_metrics).by_cell


def not_recorded(item: Compared) -> bool:
    """The pair's workload kept no outputs: nothing was compared."""
    return item.agreement is not None and not item.agreement.recorded
