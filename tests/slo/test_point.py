"""A point judged against a latency goal (workflow_scripts.slo.point, .verdict, .objectives):
verdicts below, at and above a limit, a p99 from too few requests, attainment and its target,
goodput, which requests count (one-token, errored, warm-up), TTFT and E2E from each request's
scheduled time under open-loop arrivals, and the goal's config refusals
(by the schema), one per bad input, each naming its key."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.support.pipeline import tiny_config, tiny_workload
from tests.support.refusals import names_key
from workflow_scripts.config.matrix import validate_config
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.records import ERROR, INCOMPLETE, OK, RequestRecord, read_records
from workflow_scripts.loadgen.request_table import RequestFigures, RequestTable
from workflow_scripts.slo.objectives import Objective, Slo
from workflow_scripts.slo.point import evaluate_point, meets_goal
from workflow_scripts.verdicts.verdict import (
    Verdict,
    attainment_verdict,
    combined,
    percentile_verdict,
)
from workflow_scripts.vocabulary import ConfigError

TOKENS = 11


def request(i, tpot_ms, ttft_ms=100.0, tokens=TOKENS, status=OK, warmup=False):
    """A request whose TPOT is `tpot_ms` exactly: e2e = TTFT + (tokens - 1) x TPOT."""
    e2e_s = (ttft_ms + tpot_ms * (tokens - 1)) / 1000
    return RequestRecord(
        index=i,
        prompt_index=i,
        status=status,
        warmup=warmup,
        sent_s=float(i),
        ttft_s=ttft_ms / 1000,
        e2e_s=e2e_s,
        prompt_tokens=20,
        completion_tokens=tokens,
    )


def run(tpots, **kwargs):
    return [request(i, t, **kwargs) for i, t in enumerate(tpots)]


def judged(slo, records, metrics):
    """A point judged on its records' table, as every caller builds it (RequestTable.of)."""
    return evaluate_point(slo, RequestTable.of(records), metrics)


def tpot_goal(percentile=90.0, max_ms=52.0, attainment=None):
    return Slo((Objective("tpot_ms", percentile, max_ms),), attainment)


METRICS = {"duration_s": 10.0, "req_per_s": 10.0, "decode_tok_s": 110.0}
SPREAD = [1.0 + i for i in range(100)]  # TPOT 1..100 ms: p90 = 90.1 (interpolated)


def test_well_below_and_well_above_the_limit():
    below = judged(tpot_goal(), run([30 + i / 10 for i in range(100)]), METRICS)
    above = judged(tpot_goal(), run([60 + i / 10 for i in range(100)]), METRICS)
    assert below.verdict == below.objectives[0].verdict == Verdict.PASS
    assert above.verdict == above.objectives[0].verdict == Verdict.FAIL
    assert below.objectives[0].bound.hi <= 52 < above.objectives[0].bound.lo


def test_a_percentile_exactly_at_the_limit_is_unresolved():
    result = judged(tpot_goal(max_ms=90.1), run(SPREAD), METRICS)
    bound = result.objectives[0].bound
    assert bound.value == pytest.approx(90.1)
    assert bound.lo < 90.1 < bound.hi
    assert result.verdict == Verdict.UNRESOLVED


def test_where_the_bounds_sit_the_verdict_turns():
    """pass needs hi <= limit (equal passes), fail needs lo > limit (equal does not)."""
    bound = judged(tpot_goal(), run(SPREAD), METRICS).objectives[0].bound
    lo, hi = bound.lo, bound.hi
    assert (lo, hi) == pytest.approx((84.0, 96.0))  # ranks 84 and 96 of 100, p90 at 95 %
    for limit, verdict in [
        (hi, Verdict.PASS),
        (hi - 0.01, Verdict.UNRESOLVED),
        (lo, Verdict.UNRESOLVED),
        (lo - 0.01, Verdict.FAIL),
    ]:
        assert judged(tpot_goal(max_ms=limit), run(SPREAD), METRICS).verdict == verdict
    assert percentile_verdict(None, None, 1.0) == Verdict.UNRESOLVED


def test_a_p99_from_16_requests_cannot_pass_but_can_fail():
    fast = judged(tpot_goal(99, 52), run([10.0 + i for i in range(16)]), METRICS)
    assert fast.objectives[0].bound.hi is None
    assert fast.verdict == Verdict.UNRESOLVED  # every request was fast, still not shown
    slow = judged(tpot_goal(99, 52), run([200.0 + i for i in range(16)]), METRICS)
    assert slow.verdict == Verdict.FAIL  # the lower bound exists and is above the limit


def test_attainment_against_its_target():
    tpots = [30.0] * 95 + [80.0] * 5  # 95 of 100 meet tpot <= 52: interval about [0.89, 0.98]
    goal = Slo((Objective("tpot_ms", 50, 52.0),), None)
    result = judged(goal, run(tpots), METRICS)
    attainment = result.attainment
    assert (attainment.good, attainment.n, attainment.fraction) == (95, 100, 0.95)
    assert attainment.lo == pytest.approx(0.8872, abs=1e-4)
    assert attainment.hi == pytest.approx(0.9836, abs=1e-4)
    assert attainment.verdict is None and result.verdict == Verdict.PASS  # no target: no say
    for target, verdict in [(0.85, Verdict.PASS), (0.9, Verdict.UNRESOLVED), (0.99, Verdict.FAIL)]:
        goal = Slo((Objective("tpot_ms", 50, 52.0),), target)
        result = judged(goal, run(tpots), METRICS)
        assert result.attainment.verdict == result.verdict == verdict
    assert attainment_verdict(0.9, 0.95, 0.9) == Verdict.PASS  # lo reaching the target passes


def test_an_attainment_of_one_never_passes():
    goal = Slo((Objective("tpot_ms", 50, 52.0),), 1.0)
    assert judged(goal, run([30.0] * 1000), METRICS).verdict == Verdict.UNRESOLVED


def test_the_point_fails_if_any_objective_fails_and_passes_only_if_all_pass():
    assert combined([Verdict.PASS, Verdict.FAIL, Verdict.UNRESOLVED]) == Verdict.FAIL
    assert combined([Verdict.PASS, Verdict.UNRESOLVED]) == Verdict.UNRESOLVED
    assert combined([Verdict.PASS, Verdict.PASS]) == Verdict.PASS
    goal = Slo((Objective("ttft_ms", 90, 500.0), Objective("tpot_ms", 90, 52.0)))
    slow_start = judged(goal, run([30.0] * 100, ttft_ms=900.0), METRICS)
    assert [o.verdict for o in slow_start.objectives] == [Verdict.FAIL, Verdict.PASS]
    assert slow_start.verdict == Verdict.FAIL
    e2e = Slo((Objective("e2el_ms", 90, 350.0),))  # e2e = 100 + 10 x 30 = 400 ms
    assert judged(e2e, run([30.0] * 100), METRICS).verdict == Verdict.FAIL


def test_goodput_counts_the_requests_that_met_every_objective():
    records = run([30.0] * 5 + [80.0] * 5)
    result = judged(tpot_goal(), records, METRICS)
    assert result.goodput_req_s == pytest.approx(5 / 10.0)
    assert result.goodput_decode_tok_s == pytest.approx(5 * TOKENS / 10.0)
    assert (result.req_per_s, result.decode_tok_s) == (10.0, 110.0)  # the cell's own
    assert judged(tpot_goal(), records, {}).goodput_req_s is None  # no duration


def test_the_goal_agrees_with_the_load_clients_goodput():
    """compute_metrics' goodput (a limit per request, no percentile) counts the same requests."""
    records = run([30.5 + i for i in range(40)])  # 30.5 .. 51.5 meet 52
    metrics = compute_metrics(records, slo={"tpot_ms": 52.0})
    result = judged(tpot_goal(), records, metrics)
    assert result.goodput_req_s == pytest.approx(metrics["goodput"]["req_per_s"])
    assert result.attainment.good == metrics["goodput"]["good_requests"] == 22


def test_a_one_token_request_meets_tpot_but_not_a_slow_ttft():
    one = request(99, 0.0, ttft_ms=100.0, tokens=1)
    assert meets_goal(RequestFigures.of(one), tpot_goal())
    both = Slo((Objective("ttft_ms", 90, 50.0), Objective("tpot_ms", 90, 52.0)))
    assert not meets_goal(RequestFigures.of(one), both)
    result = judged(tpot_goal(), run([30.0] * 10) + [one], METRICS)
    assert result.objectives[0].bound.n == 10  # no TPOT: not among the percentile's values
    assert (result.attainment.good, result.attainment.n) == (11, 11)


def test_errors_warmup_and_records_read_back(tmp_path):
    """Errored and cut-off requests are counted, not judged; warm-up is left out; records read
    back from requests.jsonl judge the same."""
    records = run([30.0] * 40)
    records += [request(40, 500.0, status=ERROR), request(41, 500.0, status=INCOMPLETE)]
    records += [request(42, 500.0, warmup=True)]
    result = judged(tpot_goal(), records, METRICS)
    assert (result.completed, result.errors, result.incomplete) == (40, 1, 1)
    assert result.verdict == Verdict.PASS
    written = tmp_path / "requests.jsonl"
    written.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    again = judged(tpot_goal(), read_records(written), METRICS)
    assert again == result
    assert result.to_dict()["verdict"] == "pass"


def test_no_completed_request_decides_nothing():
    result = judged(tpot_goal(), [request(0, 1.0, status=ERROR)], METRICS)
    assert result.verdict == Verdict.UNRESOLVED and result.objectives[0].bound.n == 0


def test_wall_time_from_the_cells_stamps():
    stamps = {"started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:01:05Z"}
    assert judged(tpot_goal(), run([30.0]), stamps).wall_s == 65.0
    assert judged(tpot_goal(), run([30.0]), {"ready_s": 3, "duration_s": 9}).wall_s == 12


GOAL = {"tpot_ms": {"percentile": 90, "max": 52}, "ttft_ms": {"percentile": 99, "max": 2000}}


def configured(goal):
    """`goal` as workload `w`'s, through the config's checks: the validated workload's `slo`."""
    cells = [{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "w"}]
    config = tiny_config(cells, workloads={"w": tiny_workload(slo=goal)})
    return validate_config(config)["workloads"]["w"]["slo"]


def test_a_goal_from_the_config():
    slo = Slo.from_dict(configured({**GOAL, "attainment": 0.9}))
    assert [o.figure for o in slo.objectives] == ["ttft_ms", "tpot_ms"]
    assert slo.objectives[1] == Objective("tpot_ms", 90.0, 52.0)
    assert slo.attainment == 0.9
    assert Slo.from_dict(slo.to_dict()) == slo
    assert slo.text == "ttft p99 ≤ 2000 ms, tpot p90 ≤ 52 ms, attainment ≥ 0.9"


@pytest.mark.parametrize(
    ("goal", "key"),
    [
        ({"itl_ms": {"percentile": 90, "max": 5}}, "workloads.w.slo.itl_ms"),
        ({"tpot_ms": {"percentile": 0, "max": 52}}, "workloads.w.slo.tpot_ms.percentile"),
        ({"tpot_ms": {"percentile": 100, "max": 52}}, "workloads.w.slo.tpot_ms.percentile"),
        ({"tpot_ms": {"percentile": -5, "max": 52}}, "workloads.w.slo.tpot_ms.percentile"),
        ({"tpot_ms": {"percentile": "p90", "max": 52}}, "workloads.w.slo.tpot_ms.percentile"),
        ({"tpot_ms": {"percentile": True, "max": 52}}, "workloads.w.slo.tpot_ms.percentile"),
        ({"tpot_ms": {"percentile": 90, "max": 0}}, "workloads.w.slo.tpot_ms.max"),
        ({"tpot_ms": {"percentile": 90, "max": -1}}, "workloads.w.slo.tpot_ms.max"),
        ({"tpot_ms": {"percentile": 90, "max": float("inf")}}, "workloads.w.slo.tpot_ms.max"),
        ({"tpot_ms": {"percentile": 90}}, "workloads.w.slo.tpot_ms.max"),
        ({"tpot_ms": {"max": 52}}, "workloads.w.slo.tpot_ms.percentile"),
        ({"tpot_ms": {"percentile": 90, "max": 52, "p": 1}}, "workloads.w.slo.tpot_ms.p"),
        ({"tpot_ms": 52}, "workloads.w.slo.tpot_ms"),
        ({**GOAL, "attainment": 0}, "workloads.w.slo.attainment"),
        ({**GOAL, "attainment": 1.5}, "workloads.w.slo.attainment"),
        ({**GOAL, "attainment": -0.1}, "workloads.w.slo.attainment"),
        ({"attainment": 0.9}, "workloads.w.slo"),
        ({}, "workloads.w.slo"),
        ([GOAL], "workloads.w.slo"),
    ],
)
def test_a_goal_that_cannot_be_run_is_refused_naming_its_key(goal, key):
    with pytest.raises(ConfigError) as error:
        configured(goal)
    assert names_key(str(error.value), key), str(error.value)


def test_the_edges_of_the_ranges_are_accepted():
    slo = Slo.from_dict(
        configured({"e2el_ms": {"percentile": 99.9, "max": 0.001}, "attainment": 0.999})
    )
    assert slo.objectives[0].label == "e2el p99.9" and slo.attainment == 0.999


def open_loop(records, wait_ms):
    """The same requests under open-loop arrivals: each was due `wait_ms` before its send (it
    waited that long for a free slot)."""
    return [dataclasses.replace(r, scheduled_s=r.sent_s - wait_ms / 1000) for r in records]


def test_an_open_loop_points_ttft_and_e2e_goals_count_from_when_each_request_was_due():
    """TTFT 100 ms and E2E 400 ms from the send; each request waited 400 ms for a slot, so from
    its schedule TTFT is 500 ms and E2E 800 ms: the goals that pass from the send fail."""
    goal = Slo((Objective("ttft_ms", 90, 300.0), Objective("e2el_ms", 90, 600.0)))
    closed = run([30.0] * 100)  # e2e = 100 + 10 x 30 = 400 ms
    sent = judged(goal, closed, METRICS)
    due = judged(goal, open_loop(closed, 400.0), METRICS)
    assert [o.bound.value for o in due.objectives] == [pytest.approx(500.0), pytest.approx(800.0)]
    assert (sent.verdict, due.verdict) == (Verdict.PASS, Verdict.FAIL)
    assert (sent.latency_from, due.latency_from) == ("send", "schedule")
    assert [o.verdict for o in due.objectives] == [Verdict.FAIL, Verdict.FAIL]
    assert (due.attainment.good, due.goodput_req_s) == (0, 0.0)
    assert (sent.attainment.good, sent.goodput_req_s) == (100, 10.0)
    assert due.to_dict()["latency_from"] == "schedule"  # what slo.json and the tables hold


def test_a_tpot_goal_is_judged_alike_whatever_the_wait():
    """TPOT runs between tokens: a wait before the send reaches none of it."""
    records = run([30.0 + i / 10 for i in range(100)])
    sent = judged(tpot_goal(), records, METRICS)
    due = judged(tpot_goal(), open_loop(records, 5000.0), METRICS)
    assert due.objectives[0].bound == sent.objectives[0].bound
    assert due.verdict == sent.verdict == Verdict.PASS
    one = open_loop([request(0, 30.0)], 400.0)[0]
    assert not meets_goal(
        RequestFigures.of(one), Slo((Objective("ttft_ms", 90, 300.0),)), "schedule"
    )
    assert meets_goal(
        RequestFigures.of(one), Slo((Objective("ttft_ms", 90, 300.0),))
    )  # from the send by default
    assert due.latency_from == "schedule"
