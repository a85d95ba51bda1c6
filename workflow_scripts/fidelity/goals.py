"""A fidelity goal (`fidelity:` per model or matrix-wide), judged from each figure's interval.

A goal bounds any of: `kld_mean: {max}`, `kld_p99: {max}`, `same_top_pct: {min}` and
`agreement_of_floor_pct: {min}` (MLPerf's "99 % of the reference"). Each objective is `pass`
when the figure's 95 % interval lies entirely within the bound, `fail` when entirely outside,
`unresolved` when it straddles the bound, and `not measured` when the cell has no such figure.

The intervals: llama-perplexity prints KL mean and same-top-token % as `value ± err` where err
is a standard error (sqrt(variance / (n - 1)) over the text's tokens, 0 at 10 tokens or fewer),
so the interval is value ± 1.96 err; tokens of one text are not independent, so it is narrower
than the truth. KL p99 comes with none: pass or fail on the value. Agreement of the floor is the
pair's identical % over the floor's, its interval the pair's Wilson bounds over the floor's
value (the floor taken as measured; 100 % when no floor was measured), each capped at 100 %: a
pair cannot agree more often than the reference agrees with itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..verdicts.bounds import Z_95
from ..verdicts.verdict import Verdict, attainment_verdict, combined, percentile_verdict
from .agreement import Agreement

NOT_MEASURED = "not measured"
MAX, MIN = "max", "min"

# Each figure a goal may bound: its bound's key and how a card names it.
BOUNDS = {
    "kld_mean": (MAX, "KL mean"),
    "kld_p99": (MAX, "KL p99"),
    "same_top_pct": (MIN, "same top %"),
    "agreement_of_floor_pct": (MIN, "agreement % of floor"),
}
# The figures llama-perplexity gives (fidelity.kld): only an engine with the tool measures them.
KLD_FIGURES = ("kld_mean", "kld_p99", "same_top_pct")
# The most agreement of the floor can be (a pair agreeing more often than the floor is noise).
AGREEMENT_OF_FLOOR_CAP_PCT = 100.0


@dataclass(frozen=True)
class Figure:
    """A measured value and its 95 % interval (lo = hi = value where it has none)."""

    value: float
    lo: float
    hi: float

    @classmethod
    def exact(cls, value: float) -> Figure:
        """A figure given without an interval."""
        return cls(value, value, value)

    @classmethod
    def from_standard_error(cls, value: float, err: float | None) -> Figure:
        """value ± 1.96 err; a missing err is no interval."""
        half = Z_95 * (err or 0.0)
        return cls(value, value - half, value + half)

    @property
    def text(self) -> str:
        """`0.012`, `0.012 ± 0.0039` (a symmetric interval) or `93.8 [71.7, 98.9]`."""
        if self.lo == self.hi == self.value:
            return f"{self.value:.3g}"
        if math.isclose(self.hi - self.value, self.value - self.lo):
            return f"{self.value:.3g} ± {self.hi - self.value:.2g}"
        return f"{self.value:.3g} [{self.lo:.3g}, {self.hi:.3g}]"


def agreement_of_floor(pair: Agreement, floor: Agreement | None) -> Figure | None:
    """The pair's identical % as a % of the floor's, with the pair's Wilson bounds scaled the
    same way, each capped at 100 %; None when the pair compared nothing or the floor never
    agreed (no ratio)."""
    if pair.identical_pct is None or pair.interval_pct is None:
        return None
    floor_pct = 100.0 if floor is None or floor.identical_pct is None else floor.identical_pct
    if floor_pct == 0.0:
        return None
    scale = 100.0 / floor_pct
    lo, value, hi = (
        min(pct * scale, AGREEMENT_OF_FLOOR_CAP_PCT)
        for pct in (pair.interval_pct[0], pair.identical_pct, pair.interval_pct[1])
    )
    return Figure(value, lo, hi)


@dataclass(frozen=True)
class FidelityFigures:
    """What a cell measured, each figure None where it was not: KL from llama-perplexity
    (GGUF quants), agreement of the floor from greedy outputs."""

    kld_mean: Figure | None = None
    kld_p99: Figure | None = None
    same_top_pct: Figure | None = None
    agreement_of_floor_pct: Figure | None = None

    @classmethod
    def measured(
        cls,
        kld_mean: float | None = None,
        kld_mean_err: float | None = None,
        kld_p99: float | None = None,
        same_top_pct: float | None = None,
        same_top_err_pct: float | None = None,
        agreement: Agreement | None = None,
        floor: Agreement | None = None,
    ) -> FidelityFigures:
        """From the tool's values and standard errors and the pair's and floor's agreement."""
        return cls(
            kld_mean=None
            if kld_mean is None
            else Figure.from_standard_error(kld_mean, kld_mean_err),
            kld_p99=None if kld_p99 is None else Figure.exact(kld_p99),
            same_top_pct=(
                None
                if same_top_pct is None
                else Figure.from_standard_error(same_top_pct, same_top_err_pct)
            ),
            agreement_of_floor_pct=(
                None if agreement is None else agreement_of_floor(agreement, floor)
            ),
        )


@dataclass(frozen=True)
class FidelityObjective:
    """`figure` (a key of BOUNDS) at most (`bound` max) or at least (min) `limit`."""

    figure: str
    bound: str
    limit: float

    @property
    def label(self) -> str:
        return BOUNDS[self.figure][1]

    @property
    def text(self) -> str:
        """`KL mean ≤ 0.05`."""
        return f"{self.label} {'≤' if self.bound == MAX else '≥'} {self.limit:g}"

    def judge(self, figure: Figure | None) -> Verdict | None:
        """pass / fail / unresolved from the figure's interval; None: not measured."""
        if figure is None:
            return None
        if self.bound == MAX:
            return percentile_verdict(figure.lo, figure.hi, self.limit)
        return attainment_verdict(figure.lo, figure.hi, self.limit)


@dataclass(frozen=True)
class FidelityGoal:
    """The objectives a cell's outputs must meet, in BOUNDS order; at least one."""

    objectives: tuple[FidelityObjective, ...]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FidelityGoal:
        """A goal as the config states it (its schema, `$defs.fidelity`, refused a key or bound
        that means nothing, a limit that is no number and a goal without an objective) or as
        `to_dict` wrote it."""
        return cls(
            tuple(
                FidelityObjective(figure, bound, float(data[figure][bound]))
                for figure, (bound, _) in BOUNDS.items()
                if figure in data
            )
        )

    def to_dict(self) -> dict[str, dict[str, float]]:
        """As the config spells it (a canonical param: a changed goal changes it)."""
        return {o.figure: {o.bound: o.limit} for o in self.objectives}

    @property
    def text(self) -> str:
        """`KL mean ≤ 0.05, same top % ≥ 90`."""
        return ", ".join(o.text for o in self.objectives)


@dataclass(frozen=True)
class ObjectiveVerdict:
    """One objective judged: the figure it saw (None: not measured) and its verdict; `note`:
    why a figure that should have been measured was not (its verdict then unresolved)."""

    objective: FidelityObjective
    figure: Figure | None
    verdict: Verdict | None
    note: str = ""

    @property
    def word(self) -> str:
        """pass, fail, unresolved or `not measured`."""
        return NOT_MEASURED if self.verdict is None else str(self.verdict)

    @property
    def text(self) -> str:
        """`KL mean 0.012 ± 0.0039 ≤ 0.05: pass`, `KL p99: not measured`,
        `KL mean: unresolved (failed: ...)`."""
        o = self.objective
        if self.figure is None:
            return f"{o.label}: {self.word}" + (f" ({self.note})" if self.note else "")
        sign = "≤" if o.bound == MAX else "≥"
        return f"{o.label} {self.figure.text} {sign} {o.limit:g}: {self.word}"


@dataclass(frozen=True)
class GoalVerdict:
    """A goal judged: each objective, and overall fail if any fails, pass if every measured
    one passes, else unresolved (also when none was measured)."""

    objectives: tuple[ObjectiveVerdict, ...]

    @property
    def verdict(self) -> Verdict:
        measured = [o.verdict for o in self.objectives if o.verdict is not None]
        return combined(measured) if measured else Verdict.UNRESOLVED

    @property
    def texts(self) -> tuple[str, ...]:
        """One line per objective, for the card."""
        return tuple(o.text for o in self.objectives)


def judge(
    goal: FidelityGoal, figures: FidelityFigures, unusable: Mapping[str, str] | None = None
) -> GoalVerdict:
    """Each of the goal's objectives against the figure it bounds. `unusable`: figures whose
    measurement failed, by name, with why: their objectives are unresolved, never passed."""
    out = []
    for o in goal.objectives:
        figure = getattr(figures, o.figure)
        why = (unusable or {}).get(o.figure)
        if figure is None and why:
            out.append(ObjectiveVerdict(o, None, Verdict.UNRESOLVED, why))
        else:
            out.append(ObjectiveVerdict(o, figure, o.judge(figure)))
    return GoalVerdict(tuple(out))
