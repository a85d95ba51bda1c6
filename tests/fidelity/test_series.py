"""A series' fidelity verdicts as a family (workflow_scripts.fidelity.series): Holm's step-down
over its points and one pooled verdict, on hand-made agreements, then against a STAND-IN's
output law (`fixtures/sweeps/law.py`: no real drafter's outputs are known in advance) over many
seeded series of 8 points: a lossless drafter whose outputs vary as much as the floor at every
point reads `changed` somewhere in at most 5 % of series, and a drafter that alters a known share
of the outputs at one point, or at every point, is found with the known agreement."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest

from tests.fixtures.sweeps.law import Law, answer_token, prompt_seed
from workflow_scripts.fidelity.agreement import (
    CHANGED,
    UNCHANGED,
    UNRESOLVED,
    Agreement,
    compare_outputs,
)
from workflow_scripts.fidelity.series import SeriesPoint, judge_series
from workflow_scripts.verdicts.bounds import clopper_pearson
from workflow_scripts.verdicts.families import LEVEL

LABELS = ["c1", "c8", "c32", "c128"]


def points(pairs: list[tuple[int, int]], floors: list[tuple[int, int] | None]) -> list:
    return [
        SeriesPoint(
            f"cell-{label}", label, Agreement(n, same), None if f is None else Agreement(f[1], f[0])
        )
        for label, (same, n), f in zip(LABELS, pairs, floors, strict=True)
    ]


def test_one_point_below_its_floor_alone_is_not_a_changed_series():
    """The H200's self-drafting (lossless) drafter: 18 of 32 identical at c8 against a floor of
    26 of 32, the floor's own share at c1, c32 and c128. Alone c8 is below its floor (Fisher
    p = 0.029); as one of 4 points its Holm p-value is 4 x 0.029 = 0.115, and pooled over the
    points the series is not detectably below its floors (p = 0.14)."""
    judged = judge_series(points([(26, 32), (18, 32), (26, 32), (26, 32)], [(26, 32)] * 4))
    c8 = judged.points[1]
    assert c8.alone.verdict == CHANGED and c8.alone.p_value == pytest.approx(0.02884, abs=1e-5)
    assert c8.p_adjusted == pytest.approx(4 * c8.alone.p_value)
    assert [p.verdict for p in judged.points] == [UNCHANGED] * 4
    assert "not as one of 4 points (Holm p = 0.12)" in c8.reason
    assert judged.family == "Holm over 4 points of the series at 5 %"
    assert judged.verdict == UNCHANGED and judged.p_value == pytest.approx(0.1443, abs=1e-4)
    assert judged.reason.startswith("96/128 identical vs floor 104/128 over 4 points")
    assert judged.note == (
        "below the floor on its own at c8 (p = 0.029, Holm p = 0.12), not as one of the "
        "series' points"
    )


def test_evidence_spread_over_the_points_adds_up_and_the_points_disagreeing_is_said():
    """28 of 32 identical against a floor of 32 of 32 at every point: 0.057 alone at each, so
    no point is changed, but pooled the series is (p = 1.0e-05)."""
    judged = judge_series(points([(28, 32)] * 4, [(32, 32)] * 4))
    assert [p.alone.verdict for p in judged.points] == [UNCHANGED] * 4
    assert [p.verdict for p in judged.points] == [UNCHANGED] * 4
    assert judged.verdict == CHANGED and judged.p_value == pytest.approx(1.026e-5, rel=1e-3)
    assert judged.note == "points disagree: not detectably changed at c1, c8, c32 and c128"
    # a real change at one point stays found as one of the family, and the pooled verdict says so
    judged = judge_series(points([(32, 32), (10, 32), (32, 32), (31, 32)], [(32, 32)] * 4))
    assert [p.verdict for p in judged.points] == [UNCHANGED, CHANGED, UNCHANGED, UNCHANGED]
    assert judged.verdict == CHANGED
    assert judged.note == "points disagree: not detectably changed at c1, c32 and c128"
    same = judge_series(points([(10, 32)] * 4, [(32, 32)] * 4))
    assert {p.verdict for p in same.points} == {CHANGED} and same.note == ""  # all agree


def test_points_without_a_floor_or_too_few_prompts():
    no_floor = judge_series(points([(32, 32)] * 4, [None] * 4))
    assert no_floor.verdict == UNCHANGED and "no floor measured" in no_floor.reason
    differ = judge_series(points([(32, 32), (30, 32), (32, 32), (32, 32)], [None] * 4))
    assert differ.verdict == UNRESOLVED and differ.points[1].verdict == UNRESOLVED
    partly = judge_series(points([(26, 32)] * 4, [(26, 32), None, (26, 32), (26, 32)]))
    assert partly.family == "Holm over 3 points of the series at 5 %"
    assert "(c8 left out: no floor or nothing compared)" in partly.reason
    few = judge_series(points([(0, 1)] * 4, [(1, 1)] * 4))  # 4 prompts in all: 1/16 at best
    assert few.verdict == UNRESOLVED and "too few prompts" in few.reason
    alone = judge_series([SeriesPoint("cell", "c1", Agreement(32, 18), Agreement(32, 26))])
    assert alone.family == "alone at 5 %" and alone.points[0].verdict == CHANGED


# --- the family check against the stand-in's output law --------------------------------------

N_PROMPTS, POINTS, MAX_TOKENS, ALTER_AFTER = 32, 8, 8, 2
PROMPTS = [f"question {i} of the family check" for i in range(N_PROMPTS)]


@dataclass(frozen=True)
class Regime:
    """How the stand-in's outputs vary from run to run: each answer of a run is noisy (the
    law's noise from token K on, a fresh nonce) with probability `noise`, the reference run's
    too where `reference_noisy` (then a pair and its floor share the reference's noise)."""

    noise: float
    reference_noisy: bool


SHARED = Regime(0.10, True)  # every run noisy: agreement (1 - q)^2 = 0.81, as 26 of 32
APART = Regime(0.19, False)  # the reference as the law says, the others noisy: 0.81


def noisy_prompts(rng: random.Random, noise: float, on: bool = True) -> set[int]:
    """The prompts whose answers are noisy in one run (none where `on` is false)."""
    return {i for i in range(N_PROMPTS) if rng.random() < noise} if on else set()


def altered_prompts(share: float) -> frozenset[int]:
    law = Law(alter_share=share, alter_after=ALTER_AFTER)
    return frozenset(i for i, p in enumerate(PROMPTS) if law.altered(p, MAX_TOKENS))


def simulated_series(
    rng: random.Random, regime: Regime, altered: frozenset[int] = frozenset(), at=()
) -> tuple[list[SeriesPoint], list[int]]:
    """One series of POINTS points: each point a reference run, its floor run and the drafter's
    run, the drafter altering `altered` at the points `at`; an answer is identical to the
    reference's unless either is noisy or the drafter altered it (law.py's `agreement`). Also
    the known identical count at each point."""
    out, known = [], []
    for j in range(POINTS):
        reference = noisy_prompts(rng, regime.noise, regime.reference_noisy)
        floor, drafter = noisy_prompts(rng, regime.noise), noisy_prompts(rng, regime.noise)
        changed = altered if j in at else frozenset()
        pair = N_PROMPTS - len(reference | drafter | changed)
        floor_same = N_PROMPTS - len(reference | floor)
        label = f"c{2**j}"
        out.append(
            SeriesPoint(label, label, Agreement(N_PROMPTS, pair), Agreement(N_PROMPTS, floor_same))
        )
        known.append(pair)
    return out, known


def share_with_interval(hits: int, trials: int) -> tuple[float, float, float]:
    lo, hi = clopper_pearson(hits, trials)
    return hits / trials, lo, hi


def run_records(noisy: set[int], altered: frozenset[int], rng: random.Random) -> list[dict]:
    """A run's records as the stand-in answers (law.py's tokens): noisy answers from token K on
    with a fresh nonce, the drafter's altered ones from K on."""
    out = []
    for i, prompt in enumerate(PROMPTS):
        seed = prompt_seed(prompt)
        nonce = rng.getrandbits(64) if i in noisy else None
        alter_from = ALTER_AFTER if (nonce is not None or i in altered) else None
        text = "".join(answer_token(seed, t, alter_from, nonce) for t in range(MAX_TOKENS))
        out.append({"prompt_index": i, "status": "ok", "warmup": False, "output": text})
    return out


@pytest.mark.standin
def test_the_simulated_agreement_is_what_the_stand_ins_records_compare_to():
    """The fast simulation below counts identical answers from which runs were noisy or
    altered; the records the stand-in's law writes for the same runs, compared as the fidelity
    table compares them, give exactly those counts."""
    altered = altered_prompts(0.5)
    assert 0 < len(altered) < N_PROMPTS
    rng = random.Random(3)
    for _ in range(20):
        reference, floor, drafter = (noisy_prompts(rng, 0.2) for _ in range(3))
        base_run = run_records(reference, frozenset(), rng)
        pair = compare_outputs(run_records(drafter, altered, rng), base_run)
        floor_pair = compare_outputs(run_records(floor, frozenset(), rng), base_run)
        assert pair.identical == N_PROMPTS - len(reference | drafter | altered)
        assert floor_pair.identical == N_PROMPTS - len(reference | floor)


@pytest.mark.standin
@pytest.mark.parametrize("regime", [SHARED, APART], ids=["shared-noise", "apart"])
def test_a_lossless_drafter_reads_changed_in_at_most_five_percent_of_series(regime):
    """1000 seeded series of 8 points, the drafter lossless, its outputs varying as much as the
    floor's at every point: the share of series with any point `changed` (Holm's) is at most 5 %
    within its Clopper-Pearson interval, and so is the pooled verdict's. Point by point (each
    at 5 % alone) the share is far higher where the pair's and floor's noise are apart (17 %
    when this was written); docs/statistics.md has the figures."""
    rng = random.Random(20 if regime is SHARED else 21)
    series = [simulated_series(rng, regime)[0] for _ in range(1000)]
    judged = [judge_series(s) for s in series]
    family = sum(any(p.verdict == CHANGED for p in j.points) for j in judged)
    pooled = sum(j.verdict == CHANGED for j in judged)
    alone = sum(any(p.alone.verdict == CHANGED for p in j.points) for j in judged)
    for hits in (family, pooled):
        share, lo, _ = share_with_interval(hits, len(judged))
        assert lo <= LEVEL, (share, lo)
    assert family <= alone  # the family never calls more than the points alone
    if regime is APART:
        assert share_with_interval(alone, len(judged))[1] > LEVEL  # what the family buys


@pytest.mark.standin
def test_a_drafter_that_alters_outputs_at_one_point_is_found_there_with_the_known_agreement():
    """The drafter alters the law's share 0.5 of the prompts (17 of 32, by hash) at c32 only:
    found `changed` there, as one of the 8 points, in most series (88 % when this was written);
    the other points almost never; the identical count at c32 is the known one, and its mean
    over the series the law's (32 - 17) x (1 - q)."""
    altered = altered_prompts(0.5)
    assert len(altered) == 17
    rng = random.Random(30)
    found = elsewhere = 0
    counts = []
    for _ in range(300):
        series, known = simulated_series(rng, APART, altered, at=(5,))
        judged = judge_series(series)
        assert [p.agreement.identical for p in series] == known
        found += judged.points[5].verdict == CHANGED
        elsewhere += any(p.verdict == CHANGED for i, p in enumerate(judged.points) if i != 5)
        counts.append(known[5])
    assert share_with_interval(found, 300)[1] >= 0.8
    assert share_with_interval(elsewhere, 300)[1] <= LEVEL
    # the 15 prompts it leaves alone are each noisy with probability q: a binomial count
    kept, q = N_PROMPTS - 17, APART.noise
    mean, error = sum(counts) / len(counts), math.sqrt(kept * q * (1 - q) / len(counts))
    assert abs(mean - kept * (1 - q)) <= 4 * error


@pytest.mark.standin
def test_a_drafter_that_alters_a_few_outputs_at_every_point_is_found_pooled():
    """The drafter alters the law's share 0.15 (6 of 32 prompts) at every point: too few to
    tell at most points alone, found by the pooled verdict in nearly every series, over the
    known identical counts."""
    altered = altered_prompts(0.15)
    assert len(altered) == 6
    rng = random.Random(40)
    pooled = 0
    for _ in range(300):
        series, known = simulated_series(rng, APART, altered, at=range(POINTS))
        judged = judge_series(series)
        pooled += judged.verdict == CHANGED
        assert judged.reason.startswith(f"{sum(known)}/{POINTS * N_PROMPTS} identical")
    assert share_with_interval(pooled, 300)[1] >= 0.95
