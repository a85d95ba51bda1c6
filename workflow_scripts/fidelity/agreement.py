"""Greedy agreement of two cells' outputs, and its verdict against the noise floor.

Two cells that received the same prompts at temperature 0 are compared prompt by prompt: the
share of outputs that are identical (with Wilson's 95 % interval) and, for each that differs,
the first position where the two texts part. Positions are in characters of the text as the
server sent it, not tokens: the same for every engine, and no tokenizer is needed.

The noise floor is this same comparison of the reference cell against its own second run
(`compare_outputs(second_run, first_run)`): two runs of one configuration need not agree token
for token (batching changes floating-point order). A pair is `changed` only when its agreement
is detectably below the floor's: a one-sided Fisher exact test at ALPHA = 0.05. The test is
exact conditionally on the total count of identical outputs, hence conservative: at most 5 % of
pairs whose outputs agree as often as the floor's are called changed.

Stdlib only: the summary rule may import it while the Snakefile is parsed.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..loadgen.metrics import percentile
from ..loadgen.records import pair_requests
from ..verdicts.bounds import wilson_interval

UNCHANGED, CHANGED, UNRESOLVED = "unchanged", "changed", "unresolved"
NO_VERDICT = "no verdict"  # nothing the outputs can be judged on (fidelity.judgement)
ALPHA = 0.05  # the test's level: the most often a pair agreeing as the floor does is `changed`
COMPLETE = "ok"  # a request record's status when its answer ended as the protocol ends it


@dataclass(frozen=True)
class Agreement:
    """How often two cells' outputs were identical over the prompts both answered.

    `first_divergence`: one position per differing prompt, in characters: the first where the
    texts differ, or the shorter one's length when it is a prefix of the other.
    `recorded` False: a cell kept no text (`record_outputs: false`); then nothing is compared.
    `answers`: the measured answers of both cells; `empty_or_errored`: those that errored or
    are empty. A prompt both answered empty is no evidence of agreement: it is not compared.
    `unpaired`: requests both answered under one prompt and turn whose prompt texts differed:
    no pair, not compared."""

    prompts_compared: int
    identical: int
    first_divergence: tuple[int, ...] = ()
    recorded: bool = True
    answers: int = 0
    empty_or_errored: int = 0
    unpaired: int = 0

    @property
    def identical_pct(self) -> float | None:
        """The share of compared prompts whose outputs are identical, in %; None: none compared."""
        return 100.0 * self.identical / self.prompts_compared if self.prompts_compared else None

    @property
    def interval_pct(self) -> tuple[float, float] | None:
        """Wilson's 95 % interval of `identical_pct`, in %; None: none compared."""
        bounds = wilson_interval(self.identical, self.prompts_compared)
        return None if bounds is None else (100.0 * bounds[0], 100.0 * bounds[1])

    @property
    def first_divergence_quartiles(self) -> tuple[float, float, float] | None:
        """The 25th, 50th and 75th percentiles of `first_divergence` (interpolated as
        metrics.json's percentiles are); None when no output differed."""
        if not self.first_divergence:
            return None
        data = sorted(self.first_divergence)
        return percentile(data, 25), percentile(data, 50), percentile(data, 75)

    @property
    def first_divergence_median(self) -> float | None:
        quartiles = self.first_divergence_quartiles
        return None if quartiles is None else quartiles[1]


def first_divergence(text: str, reference: str) -> int | None:
    """The first character position where the texts differ; None when they are identical."""
    if text == reference:
        return None
    return len(os.path.commonprefix([text, reference]))


def compare_outputs(
    records: Iterable[Mapping[str, Any]], reference_records: Iterable[Mapping[str, Any]]
) -> Agreement:
    """A cell's outputs against its reference's, over the requests the two runs pair
    (`records.pair_requests`: measured, complete in both, the same prompt and turn, the k-th
    send with the k-th, the same prompt text); those of the same prompt but another text are
    counted (`unpaired`), not compared; a pair both answered empty is left out (two empty
    answers are no evidence of agreement). Either cell missing any complete answer's text means
    it kept none: `recorded` False, nothing compared."""
    mine, theirs = list(records), list(reference_records)
    answers = [r.get("output") for r in (*mine, *theirs) if _measured_complete(r)]
    if any(text is None for text in answers):
        return Agreement(prompts_compared=0, identical=0, recorded=False)
    pairing = pair_requests(mine, theirs)
    positions = [
        first_divergence(a["output"], b["output"])
        for a, b in pairing.pairs
        if a["output"] or b["output"]  # two empty answers are no evidence of agreement
    ]
    differing = tuple(p for p in positions if p is not None)
    counts = [_empty_or_errored(r) for r in (mine, theirs)]
    return Agreement(
        prompts_compared=len(positions),
        identical=len(positions) - len(differing),
        first_divergence=differing,
        answers=sum(c[0] for c in counts),
        empty_or_errored=sum(c[1] for c in counts),
        unpaired=pairing.unpaired,
    )


def _empty_or_errored(records: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(measured answers, those that errored or are empty)."""
    measured = [r for r in records if not r.get("warmup")]
    bad = sum(1 for r in measured if r.get("status") != COMPLETE or r.get("output") == "")
    return len(measured), bad


def _measured_complete(record: Mapping[str, Any]) -> bool:
    return not record.get("warmup") and record.get("status") == COMPLETE


def fisher_lower_p(identical: int, n: int, floor_identical: int, floor_n: int) -> float:
    """One-sided Fisher exact p-value that the pair's identical share is below the floor's:
    given the total identical count t, the pair's count is hypergeometric (n of n + floor_n
    drawn, t marked), and p = P(count <= identical), summed exactly in integers."""
    if not (0 <= identical <= n and 0 <= floor_identical <= floor_n):
        raise ValueError(f"{identical} of {n} against {floor_identical} of {floor_n}")
    total, marked = n + floor_n, identical + floor_identical
    ways = sum(
        math.comb(marked, x) * math.comb(total - marked, n - x)
        for x in range(max(0, marked - floor_n), identical + 1)
    )
    return float(Fraction(ways, math.comb(total, n)))


def smallest_p(n: int, floor: Agreement) -> float:
    """The smallest p-value n compared prompts could give against this floor (none of them
    identical): at or above ALPHA, no outcome could be called `changed`."""
    return fisher_lower_p(0, n, floor.identical, floor.prompts_compared)


@dataclass(frozen=True)
class PairVerdict:
    """A pair's verdict (UNCHANGED, CHANGED, UNRESOLVED), a one-line reason for the tables, and
    the test's p-value where the test was run."""

    verdict: str
    reason: str
    p_value: float | None = None


def judge_pair(pair: Agreement, floor: Agreement | None) -> PairVerdict:
    """The pair's agreement against the floor (None, or a floor that compared nothing: not
    measured). Without a floor a difference could be nondeterminism alone: `unchanged` only
    when every compared output is identical, else `unresolved`."""
    if not pair.recorded:
        return PairVerdict(UNRESOLVED, "outputs not recorded")
    n, same = pair.prompts_compared, pair.identical
    if n == 0 and pair.unpaired:
        sent = f"the {pair.unpaired} both answered were sent as other texts"
        return PairVerdict(UNRESOLVED, f"no prompt paired: {sent}")
    if n == 0:
        bad = f"{pair.empty_or_errored} of {pair.answers} answers empty or errored"
        return PairVerdict(NO_VERDICT, f"no evidence ({bad})")
    if floor is None or floor.prompts_compared == 0:
        if same == n:
            return PairVerdict(UNCHANGED, f"all {n} outputs identical (no floor measured)")
        return PairVerdict(
            UNRESOLVED, f"{n - same} of {n} differ; no floor to tell them from noise"
        )
    against = f"{same}/{n} identical vs floor {floor.identical}/{floor.prompts_compared}"
    if smallest_p(n, floor) >= ALPHA:
        why = "the floor never agreed" if floor.identical == 0 else "too few prompts to tell"
        return PairVerdict(UNRESOLVED, f"{against}: {why}")
    p = fisher_lower_p(same, n, floor.identical, floor.prompts_compared)
    if p < ALPHA:
        return PairVerdict(CHANGED, f"{against}: below the floor (Fisher p = {p:.2g})", p)
    return PairVerdict(UNCHANGED, f"{against}: not detectably below (Fisher p = {p:.2g})", p)


def verdict(pair: Agreement, floor: Agreement | None) -> str:
    """`unchanged`, `changed` or `unresolved` (see `judge_pair`)."""
    return judge_pair(pair, floor).verdict


def verdict_reason(pair: Agreement, floor: Agreement | None) -> str:
    """The verdict's one-line reason, for the tables."""
    return judge_pair(pair, floor).reason
