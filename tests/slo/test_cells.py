"""Every cell of a workload with a latency goal, judged in the summary and on its card
(workflow_scripts.outputs.search.cells): its verdict, goodput and attainment columns, a card section
with each objective's percentile beside its bound and limit, and a say-so wherever a p90/p99 rests
on too few requests to bound it. Hand-made records (no stand-in server); the cells come from a
real config."""

from __future__ import annotations

import dataclasses

from tests.support.pipeline import tiny_config, tiny_workload
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.loadgen.records import OK, RequestRecord
from workflow_scripts.loadgen.request_table import request_tables
from workflow_scripts.outputs.card.build import build_card
from workflow_scripts.outputs.card.render import render_markdown
from workflow_scripts.outputs.search.cells import slo_columns, slo_section, tail_note, with_slo
from workflow_scripts.outputs.tables import summary_table
from workflow_scripts.slo.objectives import Slo

GOAL = {"tpot_ms": {"percentile": 90, "max": 52}}


def records(n, tpot_ms, tokens=11):
    return [
        RequestRecord(
            index=i,
            prompt_index=i,
            status=OK,
            warmup=False,
            sent_s=float(i),
            ttft_s=0.1,
            e2e_s=(100 + tpot_ms * (tokens - 1)) / 1000,
            prompt_tokens=20,
            completion_tokens=tokens,
        )
        for i in range(n)
    ]


def cells():
    workloads = {"tiny": tiny_workload(slo=GOAL), "plain": tiny_workload()}
    entries = [
        {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"},
        {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "plain"},
    ]
    return build_cells(validate_config(tiny_config(entries, workloads=workloads)))


def metrics(cell, n):
    return {
        "cell": cell.id,
        "status": "done",
        "completed": n,
        "duration_s": 10.0,
        "req_per_s": n / 10.0,
        "decode_tok_s": 11.0 * n / 10.0,
    }


def judged_pair(n=40, tpot_ms=30.0):
    goal, plain = cells()
    out = with_slo(
        [metrics(goal, n), metrics(plain, n)],
        [goal, plain],
        request_tables({goal.id: records(n, tpot_ms), plain.id: records(n, tpot_ms)}),
        {"tiny": Slo.from_dict(GOAL)},
    )
    return goal, plain, out


def test_a_cell_with_a_goal_is_judged_and_one_without_is_not():
    _, _, (goal, plain) = judged_pair()
    assert goal["slo"]["verdict"] == "pass" and "slo" not in plain
    columns = slo_columns(goal)
    assert columns["slo_verdict"] == "pass"
    assert columns["goodput_req_s"] == 4.0 and columns["attainment"] == 1.0
    assert "tpot p90" in columns["slo_detail"] and "≤ 52 ms" in columns["slo_detail"]
    assert "slo_verdict" not in slo_columns(plain)


def test_the_summary_carries_the_goal_columns():
    goal_cell, plain_cell, judged = judged_pair(tpot_ms=60.0)
    table = summary_table(judged, [goal_cell, plain_cell])
    rows = {row["cell"]: row for row in table.to_dict("records")}
    assert rows[goal_cell.id]["slo_verdict"] == "fail"
    assert rows[goal_cell.id]["goodput_req_s"] == 0.0
    assert not isinstance(rows[plain_cell.id]["slo_verdict"], str)  # no goal: empty


def test_the_card_shows_each_objective_with_its_bound_limit_and_verdict():
    cell, _, (judged, _) = judged_pair()
    row, attainment = slo_section(judged).rows
    assert row[0] == "tpot p90" and row[3] == "≤ 52 ms" and row[4] == "pass"
    assert attainment[:2] == ("attainment", "1.000") and attainment[3] == "—"  # no target
    text = render_markdown(build_card(cell, {**metrics(cell, 40), **judged}))
    assert "Latency goal" in text and "Goodput 4.000 req/s" in text


def test_too_few_requests_to_bound_a_percentile_are_said_so():
    _, _, (judged, _) = judged_pair(n=16)
    row = slo_section(judged).rows[0]
    assert row[4] == "unresolved" and "no upper bound from 16 requests; needs 36" in row[2]
    assert tail_note({"status": "done", "completed": 16}) == (
        "p90/p99 from 16 requests: no upper bound (p90 needs 36, p99 needs 368)"
    )
    assert tail_note({"status": "done", "completed": 100}) == (
        "p99 from 100 requests: no upper bound (p99 needs 368)"
    )
    assert tail_note({"status": "done", "completed": 400}) == ""


def test_the_summary_and_card_say_an_open_loop_goal_ran_from_the_schedule():
    """The same requests, each due 400 ms before its send: a TTFT p90 <= 300 ms goal passes
    from the send (TTFT 100 ms) and fails from the schedule (500 ms); both views say which."""
    goal, _ = cells()
    ttft_goal = Slo.from_dict({"ttft_ms": {"percentile": 90, "max": 300}})
    sent = records(40, 30.0)
    due = [dataclasses.replace(r, scheduled_s=r.sent_s - 0.4) for r in sent]
    (closed,) = with_slo(
        [metrics(goal, 40)], [goal], request_tables({goal.id: sent}), {"tiny": ttft_goal}
    )
    (open_,) = with_slo(
        [metrics(goal, 40)], [goal], request_tables({goal.id: due}), {"tiny": ttft_goal}
    )
    assert (closed["slo"]["verdict"], open_["slo"]["verdict"]) == ("pass", "fail")
    assert slo_columns(closed)["slo_latency_from"] == "send"
    assert slo_columns(open_)["slo_latency_from"] == "schedule"
    (paragraph,) = slo_section(open_).paragraphs
    assert "TTFT and E2E from each request's scheduled time (open-loop arrivals)" in paragraph
    assert "from each request's send (a closed loop)" in slo_section(closed).paragraphs[0]
    row = summary_table([open_], [goal]).to_dict("records")[0]
    assert row["slo_latency_from"] == "schedule"
