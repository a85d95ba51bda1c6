"""The latency-goal tables (workflow_scripts.outputs.search.tables) from searches run end to end
on simulated probes with a known law (TPOT = a + b x concurrency, ±2 %): the row of a series
(its answer, every probe with verdict and bound, goodput and throughput at the answer, probe
count and wall time), the notes for an undecided and a non-monotone search, and the drafter at
the goal beside its base; then both tables on disk."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest

from tests.slo.configured import search_settings
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.records import OK, RequestRecord
from workflow_scripts.loadgen.request_table import RequestTable
from workflow_scripts.outputs.search.judgement import judge_files
from workflow_scripts.outputs.search.outcome import SearchOutcome
from workflow_scripts.outputs.search.tables import (
    drafter_goal_rows,
    probe_text,
    slo_row,
    write_slo_tables,
)
from workflow_scripts.outputs.spec_gain import RANDOM_TOKENS_FLAG
from workflow_scripts.slo.objectives import Slo
from workflow_scripts.slo.point import evaluate_point
from workflow_scripts.slo.search import Step, next_probe
from workflow_scripts.verdicts.verdict import Verdict
from workflow_scripts.vocabulary import RANDOM_TOKENS

GOAL = Slo.from_dict({"tpot_ms": {"percentile": 90, "max": 52}})
SPEC = search_settings(over="concurrency", min=1, max=64)
PROMPTS = 64
TOKENS = 11
STAMPS = {"started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:30Z"}


def probe(tpot_ms, n=PROMPTS, wait_ms=None):
    """n requests of one closed-loop point, TPOT spread evenly over ±2 % of `tpot_ms`; with
    `wait_ms`, of an open-loop one, each request due that long before its send."""
    records = []
    for i in range(n):
        tpot = tpot_ms * (1 + 0.04 * (i / (n - 1) - 0.5))
        records.append(
            RequestRecord(
                index=i,
                prompt_index=i,
                status=OK,
                sent_s=0.1 * i,
                ttft_s=0.05,
                e2e_s=0.05 + tpot * (TOKENS - 1) / 1000,
                prompt_tokens=20,
                completion_tokens=TOKENS,
                scheduled_s=None if wait_ms is None else 0.1 * i - wait_ms / 1000,
            )
        )
    return records, {**compute_metrics(records), **STAMPS}


def searched(a, b, drafter="none", slo=GOAL, spec=SPEC, law=None, wait_ms=None):
    """A series searched to the end: each probe measured (TPOT = a + b x load ms, or `law`)
    and judged as the summary will judge it."""
    results, verdicts = {}, {}
    while not (plan := next_probe(spec, verdicts)).done:
        load, extension = plan.key
        tpot = law(load, extension) if law else a + b * load
        records, metrics = probe(tpot, spec.prompts_for(PROMPTS, extension), wait_ms)
        results[plan.key] = evaluate_point(slo, RequestTable.of(records), metrics)
        verdicts[plan.key] = results[plan.key].verdict
    return SearchOutcome(
        series=f"m__llamacpp__q4__{drafter}__w",
        model="m",
        engine="llamacpp",
        quant="q4",
        drafter=drafter,
        workload="w",
        slo=slo,
        settings=spec,
        plan=plan,
        results=results,
    )


def test_a_series_row_gives_the_answer_every_probe_and_the_cost():
    search = searched(10, 4)  # 10 + 4c <= 52 up to c = 10 (50 ms; c = 11 is 54 ms)
    row = slo_row(search)
    assert (row["largest_passing"], row["smallest_failing"]) == (10, 11)
    assert row["num_probes"] == 8 and row["probes_wall_s"] == 8 * 30.0
    probes = row["probes"].split("; ")
    assert [p.split()[0] for p in probes] == ["c1", "c2", "c4", "c8", "c16", "c12", "c10", "c11"]
    assert probes[0].startswith("c1 n=64 pass (tpot p90 14.")
    assert "hi 14." in probes[0] and "≤ 52 ms)" in probes[0]
    assert probes[4] == "c16 n=64 fail (tpot p90 75.2 lo 75.0 > 52 ms)"  # 74 ms x 1.016
    answer = search.results[(10, 0)]
    assert row["goodput_req_s"] == answer.goodput_req_s > 0
    assert row["decode_tok_s"] == answer.decode_tok_s and row["attainment"] == 1.0
    assert row["note"] == "largest passing c10, smallest failing c11"
    assert row["slo"] == "tpot p90 ≤ 52 ms" and row["search"] == "concurrency 1..64"
    assert row["complete"] is True


def test_an_unresolved_probe_shows_both_bounds_and_its_extension():
    """At c = 12 the p90 sits on the limit through every extension: undecided, said so."""

    def law(load, _extension):
        # at c12 the p90 of the ±2 % spread (centre x 1.016) is the limit itself
        return 52.0 / 1.016 if load == 12 else 10 + 3.5 * load  # c11 passes, c13 fails

    search = searched(0, 0, law=law)
    row = slo_row(search)
    assert row["undecided"] == "c12"
    assert (row["largest_passing"], row["smallest_failing"]) == (11, 16)
    assert "c12 n=64 unresolved (tpot p90 52.0 in [" in row["probes"]
    assert "∋ 52 ms)" in row["probes"]
    assert "c12 ext1 n=128 unresolved" in row["probes"]
    assert "c12 ext2 n=256 unresolved" in row["probes"]
    assert "c12 unresolved after 2 extensions (4× prompts): not shown to pass" in row["note"]


def test_too_few_requests_for_a_p99_says_so():
    goal = Slo.from_dict({"tpot_ms": {"percentile": 99, "max": 52}})
    records, metrics = probe(20.0, n=16)
    result = evaluate_point(goal, RequestTable.of(records), metrics)
    text = probe_text(SPEC, Step(4, 0, result.verdict), result)
    assert text.startswith("c4 n=16 unresolved (tpot p99 20.")
    assert "no upper bound from 16 (needs 368) vs 52 ms" in text


def test_notes_for_min_failing_max_passing_and_a_fail_below_a_pass():
    assert "no load passes: c1 is fail" in slo_row(searched(60, 1))["note"]
    top = slo_row(searched(10, 0.1))
    assert (top["largest_passing"], top["smallest_failing"]) == (64, None)
    assert "c64 (the search's max) passes" in top["note"]
    search = searched(10, 4)
    measured = {k: r.verdict for k, r in search.results.items()}
    plan = next_probe(SPEC, {**measured, (6, 0): Verdict.FAIL})  # measured once, off this walk
    flagged = slo_row(replace(search, plan=plan))
    assert flagged["non_monotone"] == "c6<c8, c6<c10"
    assert (
        "not monotone (c6 fails below c8 passing, c6 fails below c10 passing)" in (flagged["note"])
    )


def test_an_unfinished_search_says_what_comes_next():
    plan = next_probe(SPEC, {(1, 0): Verdict.PASS})
    search = replace(searched(10, 4), plan=plan)
    row = slo_row(search)
    assert row["complete"] is False and row["note"] == "searching: next c2"


def test_the_drafter_raises_the_load_served_within_the_goal():
    base, drafter = searched(10, 4), searched(5, 3, drafter="ngram")  # 50 ms at c10, c15
    (row,) = drafter_goal_rows([base, drafter])
    assert (row["base_series"], row["drafter_series"]) == (base.series, drafter.series)
    assert (row["base_largest_passing"], row["drafter_largest_passing"]) == (10, 15)
    assert row["change"] == "the drafter raises the load served within the goal from c=10 to c=15"
    assert row["load_change_pct"] == pytest.approx(50.0)
    assert row["base_decode_tok_s"] == base.results[(10, 0)].decode_tok_s
    assert row["drafter_decode_tok_s"] == drafter.results[(15, 0)].decode_tok_s
    assert row["flags"] == ""
    (back,) = drafter_goal_rows([drafter, searched(18, 4)])  # the base now serves c8
    assert back["change"] == "the drafter raises the load served within the goal from c=8 to c=15"


def test_the_drafter_at_the_goal_edge_cases():
    drafter = searched(5, 3, drafter="ngram")
    same = drafter_goal_rows([searched(5, 3), drafter])[0]
    assert same["change"] == "the drafter leaves the load served within the goal at c=15"
    worse = drafter_goal_rows([searched(60, 1, drafter="ngram"), searched(5, 3)])[0]
    assert worse["change"] == (
        "the drafter lowers the load served within the goal from c=15 to no passing load"
    )
    top = drafter_goal_rows([searched(10, 4), searched(10, 0.1, drafter="ngram")])[0]
    assert top["change"].endswith("from c=10 to at least c=64")
    alone = drafter_goal_rows([drafter])[0]
    assert alone["flags"] == "no base series" and alone["base_largest_passing"] is None
    tighter = Slo.from_dict({"tpot_ms": {"percentile": 90, "max": 40}})
    other = drafter_goal_rows([searched(10, 4, slo=tighter), drafter])[0]
    assert other["flags"] == "base series under another goal or axis"


def test_a_drafter_searched_on_random_tokens_is_labelled_so():
    """The drafter at the goal on random prompts carries spec_gain's label; on text it does not
    (the content comes from the series' search file)."""
    base = replace(searched(10, 4), content=RANDOM_TOKENS)
    drafter = replace(searched(5, 3, drafter="ngram"), content=RANDOM_TOKENS)
    assert drafter_goal_rows([base, drafter])[0]["flags"] == RANDOM_TOKENS_FLAG
    on_text = replace(drafter, content="chat")
    assert drafter_goal_rows([base, on_text])[0]["flags"] == ""


def test_both_tables_on_disk(tmp_path):
    searches = [searched(10, 4), searched(5, 3, drafter="ngram")]
    out = {
        name: tmp_path / f"{name.rsplit('_', 1)[0]}.{name.rsplit('_', 1)[1]}"
        for name in ("slo_csv", "slo_md", "slo_drafter_csv", "slo_drafter_md")
    }
    write_slo_tables(searches, out)
    table = pd.read_csv(out["slo_csv"])
    assert list(table["series"]) == [s.series for s in searches]
    assert list(table.columns[:3]) == ["series", "largest_passing", "smallest_failing"]
    assert list(table["largest_passing"]) == [10, 15]
    md = out["slo_md"].read_text()
    assert md.startswith("# Latency goal: largest load served")
    assert "95 % distribution-free bound" in md and "c16 n=64 fail" in md
    drafter = pd.read_csv(out["slo_drafter_csv"])
    assert drafter.loc[0, "change"].endswith("from c=10 to c=15")
    assert "the drafter raises" in out["slo_drafter_md"].read_text()


def test_an_open_loop_search_judges_ttft_from_the_schedule_and_its_tables_say_so(tmp_path):
    """TTFT 50 ms from the send at every load, each request due 400 ms before it was sent (it
    waited for a free slot): under a TTFT p90 <= 300 ms goal no load passes from the schedule,
    while the same requests in a closed loop pass up to the search's max."""
    ttft_goal = Slo.from_dict({"ttft_ms": {"percentile": 90, "max": 300}})
    closed = searched(10, 0, slo=ttft_goal)
    late = replace(searched(10, 0, slo=ttft_goal, wait_ms=400.0), series="m__llamacpp__q4__none__o")
    row = slo_row(late)
    assert (slo_row(closed)["largest_passing"], row["largest_passing"]) == (64, None)
    assert row["note"] == "no load passes: c1 is fail"
    assert row["probes"] == "c1 n=64 fail (ttft p90 450.0 lo 450.0 > 300 ms)"
    assert {r.latency_from for r in late.results.values()} == {"schedule"}
    assert (slo_row(closed)["latency_from"], row["latency_from"]) == ("send", "schedule")
    out = {
        name: tmp_path / name for name in ("slo_csv", "slo_md", "slo_drafter_csv", "slo_drafter_md")
    }
    write_slo_tables([closed, late], out)
    table = pd.read_csv(out["slo_csv"])
    assert list(table["latency_from"]) == ["send", "schedule"]
    md = out["slo_md"].read_text()
    header, _, *lines = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in md.splitlines()
        if line.startswith("|")
    ]
    assert [line[header.index("latency_from")] for line in lines] == ["send", "schedule"]
    assert "`schedule` under open-loop arrivals" in md


def test_a_probes_slo_json_says_where_its_latencies_ran_from(tmp_path):
    """judge_files (the checkpoint's body) writes the basis beside the verdict."""
    records, metrics = probe(30.0, wait_ms=400.0)
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "metrics.json").write_text(json.dumps({**metrics, "cell": "x", "status": "done"}))
    (cell / "requests.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    goal = tmp_path / "goal.json"
    goal.write_text(json.dumps({"ttft_ms": {"percentile": 90, "max": 300}}))
    judge_files(goal, cell / "metrics.json", cell / "requests.jsonl", cell / "slo.json")
    judged = json.loads((cell / "slo.json").read_text())
    assert judged["verdict"] == "fail"  # TTFT 450 ms from the schedule, 50 from the send
    assert judged["result"]["latency_from"] == "schedule"
