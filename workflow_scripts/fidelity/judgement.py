"""A pair's judgement from its runs: the one that fidelity.csv, the card and the drafter flags
(spec_gain, spec_gain_sweep) all show.

Only finished runs are evidence: a cell, reference or floor run whose metrics.json is not
`done` (failed, blocked, a result its own records contradict) gives the pair no verdict, whatever
partial records it left (`no verdict: reference failed: <reason>`). Answers that errored or came
back empty are no evidence either (fidelity.agreement); where no prompt is left to compare, the
pair gets no verdict, saying how many answers were empty or errored.

Stdlib only, as the rest of fidelity/.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..text import first_line
from ..vocabulary import Status
from .agreement import NO_VERDICT, Agreement, compare_outputs, judge_pair

# How a run that is not `done` is named in a reason, by its part in the pair.
THIS_CELL, REFERENCE, FLOOR_RUN = "this cell", "reference", "floor run"


@dataclass(frozen=True)
class Run:
    """A cell's run as a judgement reads it: its metrics.json's status and reason, and its
    request records (as requests.jsonl's dicts)."""

    records: Sequence[Mapping[str, Any]]
    status: str = Status.DONE
    reason: str | None = None

    @classmethod
    def of(cls, metrics: Mapping[str, Any], records: Sequence[Any]) -> Run:
        """From a metrics.json (as the one reader gives it) and its records (dicts or
        RequestRecords)."""
        return cls(
            [r if isinstance(r, Mapping) else r.to_dict() for r in records],
            str(metrics.get("status")),
            metrics.get("reason"),
        )

    @property
    def finished(self) -> bool:
        return self.status == Status.DONE

    def why_not(self, part: str) -> str:
        """`reference failed: <reason>`."""
        return f"{part} {self.status}: {first_line(self.reason or 'no reason given', 300)}"


@dataclass(frozen=True)
class Judgement:
    """The pair's agreement (None: not compared, a run did not finish), its reference's floor
    (None: none measured, or not usable), the verdict (agreement's words, or NO_VERDICT), a
    one-line reason, and the test's p-value where it was run."""

    agreement: Agreement | None
    floor: Agreement | None
    verdict: str
    reason: str
    p_value: float | None = None

    @property
    def evidence(self) -> Agreement | None:
        """The agreement a goal may judge (its agreement of the floor): None without a verdict."""
        return None if self.verdict == NO_VERDICT else self.agreement


def judge_runs(cell: Run, reference: Run, floor: Run | None = None) -> Judgement:
    """The cell's outputs against its reference's and the reference's floor run (None: no floor
    run). Any of them not finished: no verdict, naming which and why (a failed floor leaves the
    agreement shown, without a verdict it could be judged against)."""
    for part, run in ((THIS_CELL, cell), (REFERENCE, reference)):
        if not run.finished:
            return Judgement(None, None, NO_VERDICT, run.why_not(part))
    agreement = compare_outputs(cell.records, reference.records)
    if floor is not None and not floor.finished:
        return Judgement(agreement, None, NO_VERDICT, floor.why_not(FLOOR_RUN))
    floor_agreement = None if floor is None else compare_outputs(floor.records, reference.records)
    judged = judge_pair(agreement, floor_agreement)
    reason = judged.reason
    if judged.verdict != NO_VERDICT and agreement.recorded and agreement.empty_or_errored:
        reason += f"; {agreement.empty_or_errored} of {agreement.answers} answers empty or errored"
    return Judgement(agreement, floor_agreement, judged.verdict, reason, judged.p_value)
