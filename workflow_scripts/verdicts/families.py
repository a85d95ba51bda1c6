"""Several verdicts read as one family: the points of a series are each tested at LEVEL, and a
summary drawn from all of them (the crossover, "changed at c8") would, read point by point, find
a difference somewhere far more often than LEVEL (eight tests at 5 %: up to 34 %).

- `holm`: Holm's step-down adjusted p-values. A point's family verdict is its test's at LEVEL on
  the adjusted p-value: the chance that any point of a series where nothing changed reads as
  changed is at most LEVEL, whatever the tests' dependence.
- `stratified_lower_p`: one exact test across the points (strata) of a series, each a 2 x 2
  table (a cell's successes of its trials against a control's): conditional on every stratum's
  margins each count is hypergeometric, so their sum's law is the convolution of those, and the
  p-value is its lower tail. Evidence spread thinly over the points adds up, and no one point
  decides alone. With one stratum it is Fisher's exact test.

Stdlib only, importing nothing of the package: fidelity/ and outputs/ both import it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.05  # the family's level: the most often a series where nothing changed reads changed
NEGLIGIBLE = 1e-18  # a probability left out of a stratified law's tails (exact to about 1e-16)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's adjusted p-values in the given order: sorted ascending, the i-th (from 0) of m is
    max over j <= i of min(1, (m - j) p_(j)). A None (no test) stays None and is not counted
    in m."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(tested)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


@dataclass(frozen=True)
class VerdictKeys:
    """One per-point verdict's columns in a table's rows: what its family reads (`p_value`,
    `verdict`) and writes (`adjusted`, `unadjusted`, `family`); `decisive` the verdicts a point
    keeps only where its adjusted p-value is below LEVEL, else it reads `undecided`."""

    p_value: str
    verdict: str
    adjusted: str
    unadjusted: str
    family: str
    decisive: tuple[str, ...]
    undecided: str


def judge_series(rows: Sequence[dict], series: Sequence[str | None], keys: VerdictKeys) -> None:
    """Each series' points judged as a family (`series[i]` row i's, None: a cell alone), in
    place: the p-values adjusted by Holm's step-down over the series' tested points, so a
    configuration that changes nothing reads decisive at some point of a series in at most
    LEVEL of runs; the point's own verdict kept beside, the family named where it was tested."""
    families: dict[object, list[dict]] = {}
    for i, (row, name) in enumerate(zip(rows, series, strict=True)):
        families.setdefault(name if name is not None else i, []).append(row)
    for members in families.values():
        adjusted = holm([row.get(keys.p_value) for row in members])
        tested = sum(p is not None for p in adjusted)
        for row, p in zip(members, adjusted, strict=True):
            verdict = row.get(keys.verdict)
            row[keys.unadjusted], row[keys.adjusted] = verdict, p
            row[keys.family] = family_text(tested) if verdict and p is not None else None
            if verdict in keys.decisive and p is not None and p >= LEVEL:
                row[keys.verdict] = keys.undecided


def family_text(tested: int, level: float = LEVEL) -> str:
    """How a table names the family a verdict was judged in."""
    if tested <= 1:
        return f"alone at {100 * level:g} %"
    return f"Holm over {tested} points of the series at {100 * level:g} %"


def p_text(p: float | None, adjusted: float | None = None) -> str:
    """`0.029 (Holm 0.12)`: a test's p-value, and its family-adjusted one where that differs."""
    if p is None:
        return ""
    return f"{p:.2g}" + ("" if adjusted is None or adjusted == p else f" (Holm {adjusted:.2g})")


def verdict_text(verdict: str | None, p: float | None) -> str:
    """`changed (p = 0.003)`: a verdict with the p-value of its test, where one ran."""
    if not verdict:
        return ""
    return verdict + ("" if p is None else f" (p = {p:.2g})")


@dataclass(frozen=True)
class Stratum:
    """One point's 2 x 2 table: `successes` of `trials` for the cell tested, and
    `control_successes` of `control_trials` for what it is held against."""

    successes: int
    trials: int
    control_successes: int
    control_trials: int

    def __post_init__(self) -> None:
        if not (0 <= self.successes <= self.trials and self.control_successes >= 0):
            raise ValueError(f"{self}: counts out of range")
        if self.control_successes > self.control_trials:
            raise ValueError(f"{self}: counts out of range")

    def law(self) -> tuple[int, list[float]]:
        """The tested count's hypergeometric law given the margins: (its least value, the
        probabilities of it and each value above), tails under NEGLIGIBLE left out."""
        total = self.trials + self.control_trials
        marked = self.successes + self.control_successes
        lo, hi = max(0, marked - self.control_trials), min(self.trials, marked)
        ways = math.comb(total, self.trials)
        probabilities = [
            math.comb(marked, x) * math.comb(total - marked, self.trials - x) / ways
            for x in range(lo, hi + 1)
        ]
        kept = [i for i, p in enumerate(probabilities) if p >= NEGLIGIBLE]
        return lo + kept[0], probabilities[kept[0] : kept[-1] + 1]


def stratified_lower_p(strata: Sequence[Stratum]) -> float:
    """The exact stratified p-value that the tested cells' successes are below their controls'
    (a common odds ratio below 1): P(S <= observed S), S the sum of the strata's tested counts,
    each hypergeometric given its stratum's margins. No strata: 1. Probabilities under
    NEGLIGIBLE are left out of the laws as they are combined, so it is exact to about 1e-16."""
    observed = sum(s.successes for s in strata)
    floor = 0  # the least value S keeps: the sum of the strata's least values, and what is cut
    law = [1.0]  # P(S - floor = k) for k = 0 .. while S <= observed
    for stratum in strata:
        lo, probabilities = stratum.law()
        floor += lo
        width = observed - floor + 1  # S beyond `observed` never comes back below it
        if width <= 0:
            return 0.0
        combined = [0.0] * min(width, len(law) + len(probabilities) - 1)
        for k, a in enumerate(law[: len(combined)]):
            for j, b in enumerate(probabilities[: len(combined) - k]):
                combined[k + j] += a * b
        cut, mass = 0, 0.0  # the least sums' negligible mass left out
        while cut < len(combined) - 1 and mass + combined[cut] < NEGLIGIBLE:
            mass, cut = mass + combined[cut], cut + 1
        floor, law = floor + cut, combined[cut:]
    return min(1.0, sum(law))


def smallest_stratified_p(strata: Sequence[Stratum]) -> float:
    """The smallest p-value these strata could give with their controls as they are (no
    tested trial a success): at or above the level, no outcome could be called lower."""
    return stratified_lower_p(
        [Stratum(0, s.trials, s.control_successes, s.control_trials) for s in strata]
    )
