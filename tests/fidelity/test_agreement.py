"""Greedy agreement (workflow_scripts.fidelity.agreement): which requests are compared and how,
first divergence in characters, Wilson's interval against published values, the one-sided
Fisher tail against a brute-force count of tables and its size at most ALPHA, and the verdicts.

The request records are hand-made stand-ins for a cell's requests.jsonl lines (only the keys
the comparison reads), so every expected figure is known by construction."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from workflow_scripts.fidelity.agreement import (
    ALPHA,
    CHANGED,
    NO_VERDICT,
    UNCHANGED,
    UNRESOLVED,
    Agreement,
    compare_outputs,
    first_divergence,
    fisher_lower_p,
    judge_pair,
    smallest_p,
    verdict,
    verdict_reason,
)


def record(prompt: int, output: str | None, status: str = "ok", warmup: bool = False) -> dict:
    return {"prompt_index": prompt, "status": status, "warmup": warmup, "output": output}


def answer(prompt: int) -> str:
    """A deterministic answer per prompt, as a greedy server gives."""
    return f"answer to prompt {prompt}: " + "abcdefgh" * (prompt + 1)


# --- which requests are compared ----------------------------------------------------------


def test_identical_differing_and_prefix_outputs():
    reference = [record(0, "hello world"), record(1, "same"), record(2, "abc")]
    cell = [record(0, "hello there"), record(1, "same"), record(2, "abcdef")]
    got = compare_outputs(cell, reference)
    assert (got.prompts_compared, got.identical, got.recorded) == (3, 1, True)
    assert sorted(got.first_divergence) == [3, 6]  # "abc" a prefix of "abcdef"; "hello " then
    assert got.identical_pct == pytest.approx(100 / 3)


def test_warmup_incomplete_and_one_sided_requests_are_not_compared():
    reference = [
        record(-1, "warm", warmup=True),
        record(0, "a"),
        record(1, "b"),
        record(2, "c", status="error"),
        record(3, "d"),
    ]
    cell = [
        record(-1, "other warm", warmup=True),
        record(0, "a"),
        record(1, "x"),
        record(2, "c"),
        record(4, "e"),
    ]
    got = compare_outputs(cell, reference)
    assert (got.prompts_compared, got.identical, got.first_divergence) == (2, 1, (0,))


def test_a_prompt_sent_twice_is_matched_by_occurrence_and_a_failed_send_keeps_its_place():
    """The k-th send of prompt 0 meets the k-th: the reference's second send failed, so the
    cell's second is not compared, and the third sends still meet each other."""
    reference = [record(0, "one"), record(0, "two", status="incomplete"), record(0, "three")]
    cell = [record(0, "one"), record(0, "two"), record(0, "thre3")]
    got = compare_outputs(cell, reference)
    assert (got.prompts_compared, got.identical, got.first_divergence) == (2, 1, (4,))


def test_outputs_not_recorded_compare_nothing():
    kept = [record(0, "a"), record(1, "b")]
    dropped = [record(0, None), record(1, None)]
    for cell, reference in ((kept, dropped), (dropped, kept), (dropped, dropped)):
        got = compare_outputs(cell, reference)
        assert (got.recorded, got.prompts_compared, got.identical) == (False, 0, 0)
        assert got.identical_pct is None and got.interval_pct is None
    # a record written before outputs were kept has no `output` key at all
    old = [{k: v for k, v in r.items() if k != "output"} for r in kept]
    assert compare_outputs(kept, old).recorded is False


def test_answers_both_empty_are_no_evidence_and_are_counted():
    """Prompt 0: both answers empty (no evidence of agreement: not compared); 1: one empty (the
    texts differ at 0); 2: identical; 3: the reference's errored. Before, two empty answers
    counted as identical, and all-empty cells as `unchanged`."""
    reference = [record(0, ""), record(1, ""), record(2, "a"), record(3, "b", status="error")]
    cell = [record(0, ""), record(1, "x"), record(2, "a"), record(3, "b")]
    got = compare_outputs(cell, reference)
    assert (got.prompts_compared, got.identical, got.first_divergence) == (2, 1, (0,))
    assert (got.answers, got.empty_or_errored) == (8, 4)  # reference: 2 empty, 1 error; cell: 1
    empty = [record(i, "") for i in range(16)]
    judged = judge_pair(compare_outputs(empty, empty), compare_outputs(empty, empty))
    assert (judged.verdict, judged.reason) == (
        NO_VERDICT,
        "no evidence (32 of 32 answers empty or errored)",
    )


def test_a_known_share_altered_after_a_known_position():
    """Stand-in cells: every 4th prompt's answer altered from character 20 on, so 75 % are
    identical and every divergence is at 20."""
    reference = [record(i, answer(i)) for i in range(40)]
    cell = [record(i, answer(i)[:20] + "#" + answer(i)[21:] if i % 4 == 0 else answer(i))
            for i in range(40)]  # fmt: skip
    got = compare_outputs(cell, reference)
    assert (got.prompts_compared, got.identical) == (40, 30)
    assert got.first_divergence == (20,) * 10
    assert got.first_divergence_median == 20
    lo, hi = got.interval_pct
    assert lo < 75.0 < hi


def test_first_divergence_and_its_quartiles():
    assert first_divergence("same", "same") is None
    assert first_divergence("abcX", "abcY") == 3
    assert first_divergence("", "x") == 0
    assert first_divergence("abc", "ab") == 2
    positions = (5, 1, 9, 30, 2, 7)
    got = Agreement(prompts_compared=10, identical=4, first_divergence=positions)
    assert got.first_divergence_quartiles == pytest.approx(
        tuple(np.percentile(positions, [25, 50, 75]))
    )
    assert got.first_divergence_median == pytest.approx(np.median(positions))
    assert Agreement(3, 3).first_divergence_median is None


# --- Wilson's interval ----------------------------------------------------------------------


def test_the_interval_in_percent_and_none_without_prompts():
    got = Agreement(prompts_compared=16, identical=16)
    lo, hi = got.interval_pct
    assert hi == pytest.approx(100.0) and lo == pytest.approx(100 * 16 / (16 + 1.96**2), abs=0.01)
    assert Agreement(0, 0).interval_pct is None


# --- the Fisher tail ---------------------------------------------------------------------------


def brute_force_p(identical: int, n: int, floor_identical: int, floor_n: int) -> float:
    """Label the pooled prompts, `identical + floor_identical` of them identical, and count the
    ways to deal n of them to the pair with at most `identical` identical ones."""
    pooled = [1] * (identical + floor_identical) + [0] * (n + floor_n - identical - floor_identical)
    deals = list(itertools.combinations(range(len(pooled)), n))
    low = sum(sum(pooled[i] for i in deal) <= identical for deal in deals)
    return low / len(deals)


def test_the_fisher_tail_matches_a_brute_force_count():
    for n, floor_n in itertools.product(range(1, 6), range(1, 6)):
        for a, c in itertools.product(range(n + 1), range(floor_n + 1)):
            assert fisher_lower_p(a, n, c, floor_n) == pytest.approx(
                brute_force_p(a, n, c, floor_n), abs=1e-12
            )


def test_the_fisher_tail_by_hand_and_bad_counts():
    """16 of 16 identical in the floor, 8 of 16 in the pair: 24 identical in all, and the
    pair holds the fewest it can (all 8 others), C(24, 8) C(8, 8) / C(32, 16)."""
    assert fisher_lower_p(8, 16, 16, 16) == pytest.approx(math.comb(24, 8) / math.comb(32, 16))
    with pytest.raises(ValueError):
        fisher_lower_p(5, 4, 1, 4)


def binomial_pmf(k: int, n: int, q: float) -> float:
    return math.comb(n, k) * q**k * (1 - q) ** (n - k)


@pytest.mark.parametrize(("n", "floor_n"), [(16, 16), (24, 12), (8, 40)])
def test_a_pair_agreeing_as_often_as_the_floor_is_called_changed_at_most_alpha_of_the_time(
    n, floor_n
):
    """The exact chance of `changed` when both share one rate q, summed over every outcome:
    at most ALPHA for every q; and a pair at half the floor's rate is caught most times."""

    def called_changed(q_pair: float, q_floor: float) -> float:
        total = 0.0
        for c in range(floor_n + 1):
            floor = Agreement(floor_n, c)
            for a in range(n + 1):
                if verdict(Agreement(n, a), floor) == CHANGED:
                    total += binomial_pmf(a, n, q_pair) * binomial_pmf(c, floor_n, q_floor)
        return total

    for q in np.linspace(0.05, 1.0, 20):
        assert called_changed(q, q) <= ALPHA + 1e-12
    assert called_changed(0.5, 1.0) > 0.5


def test_the_smallest_p_is_none_identical():
    """No outcome of n prompts gives a smaller p-value than none identical, so `unresolved`
    by `smallest_p` is exactly: no outcome could be called changed."""
    for n, floor_n in itertools.product(range(1, 9), range(1, 9)):
        for c in range(floor_n + 1):
            floor = Agreement(floor_n, c)
            ps = [fisher_lower_p(a, n, c, floor_n) for a in range(n + 1)]
            assert smallest_p(n, floor) == min(ps)


# --- verdicts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pair", "floor", "expected"),
    [
        (Agreement(16, 16), Agreement(16, 16), UNCHANGED),  # identical both
        (Agreement(16, 8, (3,) * 8), Agreement(16, 16), CHANGED),  # 50 % against 100 %
        (Agreement(3, 0, (1, 2, 3)), Agreement(3, 3), UNRESOLVED),  # p >= 1/C(6, 3) = ALPHA
        (Agreement(1, 0, (1,)), Agreement(16, 16), UNRESOLVED),  # 1 prompt: p >= 1/17
        (Agreement(3, 0, (1, 2, 3)), Agreement(16, 16), CHANGED),  # 3 against a steady floor
        (Agreement(16, 13, (4, 5, 6)), Agreement(16, 14, (7, 8)), UNCHANGED),  # floor noise
        (Agreement(16, 16), None, UNCHANGED),  # no floor, all identical
        (Agreement(16, 15, (9,)), None, UNRESOLVED),  # no floor, one differs
        (Agreement(16, 15, (9,)), Agreement(0, 0), UNRESOLVED),  # a floor that compared nothing
        (Agreement(0, 0, recorded=False), Agreement(16, 16), UNRESOLVED),  # not recorded
        (Agreement(0, 0), Agreement(16, 16), NO_VERDICT),  # nothing compared: no evidence
        (Agreement(16, 0, (0,) * 16), Agreement(16, 0, (0,) * 16), UNRESOLVED),  # floor never
    ],
)
def test_the_verdict_table(pair, floor, expected):
    got = judge_pair(pair, floor)
    assert got.verdict == expected == verdict(pair, floor)
    assert got.reason == verdict_reason(pair, floor)
    assert got.reason and "\n" not in got.reason
    tested = floor is not None and floor.prompts_compared and pair.prompts_compared
    if expected != UNRESOLVED and tested:
        assert got.p_value is not None and (got.p_value < ALPHA) == (expected == CHANGED)


def test_the_reasons_say_why():
    assert verdict_reason(Agreement(0, 0, recorded=False), None) == "outputs not recorded"
    assert "too few prompts" in verdict_reason(Agreement(3, 0, (1, 2, 3)), Agreement(3, 3))
    assert "floor never agreed" in verdict_reason(Agreement(16, 0, (0,) * 16), Agreement(16, 0))
    assert "no floor" in verdict_reason(Agreement(16, 15, (9,)), None)
    assert "8/16 identical vs floor 16/16" in verdict_reason(
        Agreement(16, 8, (3,) * 8), Agreement(16, 16)
    )
