"""One table of a run's requests (workflow_scripts.loadgen.request_table), built once from its
records, gives every consumer exactly what it computed from the records itself before (the card's
latency figure, a latency goal's judgement, the intervals, the stability check): the same floats to
the bit, the same requests in the same order. Checked on hand-made records with every gap a
record can have, on the output fixtures' real records, on seeded synthetic runs, and on records
the law STAND-IN (tests/fixtures/sweeps/law_server.py) answered through the real load client. And
a card computes each request's figures once."""

from __future__ import annotations

import dataclasses
import json
import math
import sys

import numpy as np
import pytest

from tests.loadgen.test_law_outputs import law_server
from tests.outputs.test_stats import simulate_run
from tests.support.outputs import BASE, cell_by_id, cell_files
from workflow_scripts.loadgen import metrics as load_metrics
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.metrics import (
    FROM_SCHEDULE,
    FROM_SEND,
    e2el_from_schedule_s,
    latency_from,
    tpot_s,
    ttft_from_schedule_s,
)
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.loadgen.records import ERROR, INCOMPLETE, OK, RequestRecord, read_records
from workflow_scripts.loadgen.request_table import RequestTable
from workflow_scripts.outputs.card.files import write_card
from workflow_scripts.outputs.plots_cell import latency_samples_ms
from workflow_scripts.outputs.stats import request_arrays
from workflow_scripts.slo.objectives import Objective, Slo
from workflow_scripts.slo.point import evaluate_point
from workflow_scripts.verdicts.bounds import CONFIDENCE, percentile_bound

# --- the records ----------------------------------------------------------------------------


def hand_made() -> list[RequestRecord]:
    """Every gap a record can have: warm-up (with a schedule the measured part lacks), errors
    with and without a first token, a cut-off request, one-token and token-less answers, a
    completed request with no TTFT, a prompt answered twice, conversation turns, ties in the
    send time, and open-loop requests each due before its send."""
    r = RequestRecord
    return [
        r(0, 0, OK, warmup=True, sent_s=0.0, scheduled_s=0.0, ttft_s=0.2, e2e_s=0.9,
          prompt_tokens=12, completion_tokens=8),
        r(1, 1, OK, sent_s=1.0, ttft_s=0.1, e2e_s=0.7, prompt_tokens=30, completion_tokens=7),
        r(2, 2, OK, sent_s=1.0, ttft_s=0.3, e2e_s=0.3, prompt_tokens=20, completion_tokens=1),
        r(3, 3, ERROR, sent_s=1.5, ttft_s=0.2, e2e_s=0.4, prompt_tokens=9, error="boom"),
        r(4, 4, ERROR, sent_s=1.6, error="refused"),
        r(5, 5, INCOMPLETE, sent_s=1.7, ttft_s=0.1, completion_tokens=3),
        r(6, 6, OK, sent_s=2.0, ttft_s=None, e2e_s=0.5, prompt_tokens=11, completion_tokens=5),
        r(7, 7, OK, sent_s=2.1, ttft_s=0.15, e2e_s=1.15, prompt_tokens=None,
          completion_tokens=None),
        r(8, 1, OK, sent_s=2.2, ttft_s=0.12, e2e_s=0.8, prompt_tokens=30, completion_tokens=9),
        r(9, 8, OK, sent_s=2.2, ttft_s=0.4, e2e_s=2.0, prompt_tokens=50, completion_tokens=33,
          session=0, turn=1),
        r(10, 8, OK, sent_s=4.3, ttft_s=0.25, e2e_s=1.3, prompt_tokens=90, completion_tokens=21,
          session=0, turn=2),
        r(11, 9, OK, sent_s=4.4, scheduled_s=4.1, ttft_s=0.3, e2e_s=0.9, prompt_tokens=40,
          completion_tokens=13),
        r(12, 10, OK, sent_s=4.5, scheduled_s=4.5, ttft_s=0.1 + 0.2, e2e_s=0.7,
          prompt_tokens=41, completion_tokens=2),
        r(13, 11, ERROR, sent_s=4.6, scheduled_s=4.2, error="timeout"),
    ]  # fmt: skip


def fixture_runs() -> list[list[RequestRecord]]:
    """The output fixtures' requests.jsonl files (a real llama.cpp run's records)."""
    from tests.support.outputs import FIXTURES

    return [read_records(p) for p in sorted((FIXTURES / "cells").glob("*/requests.jsonl"))]


def synthetic_runs() -> list[list[RequestRecord]]:
    """Seeded runs of 200 requests (enough for the stability check), one with gaps."""
    rng = np.random.default_rng(44)
    closed = simulate_run(rng, n=200, concurrency=3)
    gaps = simulate_run(rng, n=120, concurrency=4)
    gaps[3].completion_tokens = 1
    gaps[7].ttft_s = None
    gaps[9] = dataclasses.replace(gaps[9], status=ERROR, e2e_s=None)
    scheduled = [dataclasses.replace(r, scheduled_s=r.sent_s - 0.01 * (i % 7)) for i, r in
                 enumerate(simulate_run(rng, n=100, concurrency=2))]  # fmt: skip
    return [closed, gaps, scheduled]


def every_run() -> list[list[RequestRecord]]:
    return [hand_made(), *fixture_runs(), *synthetic_runs()]


# --- what each consumer computed from the records before the table --------------------------


def measured_of(records):
    return [r for r in records if not r.warmup]


def done_of(records):
    return [r for r in records if r.status == OK and not r.warmup]


def latency_samples_before(records) -> dict[str, list[float]]:
    """plots_cell.latency_samples_ms as it read the records."""
    done = done_of(records)
    ttft = [r.ttft_s * 1000 for r in done if r.ttft_s is not None]
    tpot = [tpot_s(r) * 1000 for r in done if tpot_s(r) is not None]
    return {"ttft_ms": sorted(ttft), "tpot_ms": sorted(tpot)}


def goal_figure_before(record, figure: str, basis: str) -> float | None:
    """slo.point.figure_ms as it read a record."""
    if figure == "tpot_ms":
        seconds = tpot_s(record)
    elif basis == FROM_SCHEDULE:
        seconds = (ttft_from_schedule_s if figure == "ttft_ms" else e2el_from_schedule_s)(record)
    else:
        seconds = record.ttft_s if figure == "ttft_ms" else record.e2e_s
    return None if seconds is None else seconds * 1000.0


def met_before(record, slo: Slo, basis: str) -> bool:
    for objective in slo.objectives:
        value = goal_figure_before(record, objective.figure, basis)
        if value is None and objective.figure != "tpot_ms":
            return False
        if value is not None and value > objective.max_ms:
            return False
    return True


def arrays_before(records, prompts=None) -> dict[str, object]:
    """stats.request_arrays as it read the records: the kept requests (first of each pair key,
    by pair key), each column as floats, and the duration."""
    kept = [r for r in measured_of(records) if prompts is None or r.pair_key in prompts]
    ends = [r.sent_s + r.e2e_s for r in kept if r.e2e_s is not None]
    duration = max(ends) - min(r.sent_s for r in kept) if ends else 0.0
    first: dict[tuple[int, int], RequestRecord] = {}
    for r in sorted((r for r in kept if r.status == OK), key=lambda r: r.pair_key):
        first.setdefault(r.pair_key, r)
    rows = list(first.values())

    def ms(value):
        return math.nan if value is None else float(value * 1000)

    return {
        "keys": [list(r.pair_key) for r in rows],
        "prompt_tokens": [float(r.prompt_tokens or 0) for r in rows],
        "completion_tokens": [float(r.completion_tokens or 0) for r in rows],
        "ttft_ms": [ms(r.ttft_s) for r in rows],
        "tpot_ms": [ms(tpot_s(r)) for r in rows],
        "e2e_ms": [ms(r.e2e_s) for r in rows],
        "duration_s": duration,
    }


def bits(values) -> list[str]:
    """Floats as their exact bits (NaN equal to NaN), so lists compare to the bit."""
    return [float(v).hex() for v in values]


GOALS = [
    Slo((Objective("tpot_ms", 90.0, 40.0),)),
    Slo((Objective("ttft_ms", 50.0, 250.0), Objective("e2el_ms", 90.0, 900.0)), 0.5),
    Slo((Objective("ttft_ms", 99.0, 5000.0), Objective("tpot_ms", 50.0, 5000.0)), 0.9),
]


# --- the table gives each consumer what it had ----------------------------------------------


@pytest.mark.parametrize("run", range(len(every_run())))
def test_each_row_holds_its_records_figures_as_loadgen_metrics_defines_them(run):
    records = every_run()[run]
    table = RequestTable.of(records)
    assert len(table.rows) == len(records)
    for record, row in zip(records, table.rows, strict=True):
        assert (row.pair_key, row.status, row.warmup) == (
            record.pair_key,
            record.status,
            record.warmup,
        )
        assert (row.sent_s, row.ttft_s, row.e2e_s) == (record.sent_s, record.ttft_s, record.e2e_s)
        assert row.tpot_s == tpot_s(record)
        assert row.ttft_from_schedule_s == ttft_from_schedule_s(record)
        assert row.e2el_from_schedule_s == e2el_from_schedule_s(record)
    assert table.latency_from == latency_from(measured_of(records))
    assert [r.pair_key for r in table.done] == [r.pair_key for r in done_of(records)]


@pytest.mark.parametrize("run", range(len(every_run())))
def test_the_latency_figure_the_intervals_and_the_stability_check_get_the_same_numbers(run):
    records = every_run()[run]
    table = RequestTable.of(records)
    samples, before = latency_samples_ms(table), latency_samples_before(records)
    assert {k: bits(v) for k, v in samples.items()} == {k: bits(v) for k, v in before.items()}
    keys = {r.pair_key for r in records[::2]}
    for prompts in (None, keys):
        arrays, expected = request_arrays(table, prompts), arrays_before(records, prompts)
        assert arrays.keys.tolist() == expected["keys"]
        for name in ("prompt_tokens", "completion_tokens", "ttft_ms", "tpot_ms", "e2e_ms"):
            assert bits(getattr(arrays, name)) == bits(expected[name]), name
        assert bits([arrays.duration_s]) == bits([expected["duration_s"]])
    # the stability check ranks the kept requests by their send, as it did from the records
    sent = sorted(done_of(records), key=lambda r: r.sent_s)
    assert [r.pair_key for r in sorted(table.done, key=lambda r: r.sent_s)] == [
        r.pair_key for r in sent
    ]


@pytest.mark.parametrize("run", range(len(every_run())))
def test_a_goal_judges_each_run_on_the_same_values_as_from_its_records(run):
    records = every_run()[run]
    table = RequestTable.of(records)
    measured, done = measured_of(records), done_of(records)
    basis = FROM_SCHEDULE if any(r.scheduled_s is not None for r in measured) else FROM_SEND
    metrics = {"duration_s": 10.0, "req_per_s": 1.0, "decode_tok_s": 2.0}
    for slo in GOALS:
        result = evaluate_point(slo, table, metrics)
        assert result.latency_from == basis
        for objective, found in zip(slo.objectives, result.objectives, strict=True):
            values = [goal_figure_before(r, objective.figure, basis) for r in done]
            values = [v for v in values if v is not None]
            assert found.bound == percentile_bound(values, objective.percentile, CONFIDENCE)
        good = [r for r in done if met_before(r, slo, basis)]
        assert (result.attainment.good, result.attainment.n) == (len(good), len(done))
        assert (result.errors, result.incomplete) == (
            sum(r.status == ERROR for r in measured),
            sum(r.status == INCOMPLETE for r in measured),
        )
        tokens = sum(r.completion_tokens or 0 for r in good)
        assert bits([result.goodput_decode_tok_s]) == bits([tokens / 10.0])


# --- records the law stand-in answered --------------------------------------------------------


@pytest.mark.standin
def test_the_stand_ins_records_give_every_consumer_the_same_numbers(tmp_path):
    """Closed loop with warm-up, one-token answers, and open-loop arrivals faster than the
    server takes them (each request due before its send), all through the real load client."""
    from tests.fixtures.sweeps.law import Law

    law = Law(step_ms=2, step_per_stream_ms=0.5)
    prompts = [Prompt(i, f"prompt {i}: about the sea and its tides") for i in range(40)]
    with law_server(law, False, tmp_path) as url:
        runs = [
            run_load(LoadSettings(url, 4, 6, warmup_requests=2), prompts, RunOptions(False)),
            run_load(LoadSettings(url, 2, 1, warmup_requests=1), prompts[:10], RunOptions(False)),
            run_load(
                LoadSettings(url, 2, 5, request_rate=400.0, warmup_requests=1),
                prompts,
                RunOptions(False),
            ),
        ]
    shapes = [run.records for run in runs]
    assert any(r.warmup for r in shapes[0]) and all(r.status == OK for r in shapes[0])
    assert {r.completion_tokens for r in shapes[1] if not r.warmup} == {1}
    assert latency_from(measured_of(shapes[2])) == FROM_SCHEDULE
    for records in shapes:
        table = RequestTable.of(records)
        before = latency_samples_before(records)
        assert {k: bits(v) for k, v in latency_samples_ms(table).items()} == {
            k: bits(v) for k, v in before.items()
        }
        arrays, expected = request_arrays(table), arrays_before(records)
        for name in ("ttft_ms", "tpot_ms", "e2e_ms", "completion_tokens"):
            assert bits(getattr(arrays, name)) == bits(expected[name]), name
        for slo in GOALS:
            result = evaluate_point(slo, table, {"duration_s": 1.0})
            basis = latency_from(measured_of(records))
            good = [r for r in done_of(records) if met_before(r, slo, basis)]
            assert result.attainment.good == len(good)
            for objective, found in zip(slo.objectives, result.objectives, strict=True):
                values = [goal_figure_before(r, objective.figure, basis) for r in done_of(records)]
                values = [v for v in values if v is not None]
                assert found.bound == percentile_bound(values, objective.percentile, CONFIDENCE)
        sent = sorted(done_of(records), key=lambda r: r.sent_s)
        assert [r.pair_key for r in sorted(table.done, key=lambda r: r.sent_s)] == [
            r.pair_key for r in sent
        ]


# --- a card computes each request's figures once ---------------------------------------------


def count_tpot_calls(monkeypatch) -> list[int]:
    """Every name bound to loadgen.metrics.tpot_s in the package, counting its calls."""
    calls = [0]

    def counted(record):
        calls[0] += 1
        return tpot_s(record)

    for name, module in list(sys.modules.items()):
        if name.startswith("workflow_scripts.") and getattr(module, "tpot_s", None) is tpot_s:
            monkeypatch.setattr(module, "tpot_s", counted)
    monkeypatch.setattr(load_metrics, "tpot_s", counted)
    return calls


def test_a_card_with_a_goal_computes_each_requests_tpot_once(tmp_path, monkeypatch):
    """The card's latency figure, its goal, its intervals and its stability check all read the
    one table: TPOT is computed once per record. (Before: once per record for the figure, for
    each TPOT objective twice, for the intervals and again for the stability check.)"""
    import workflow_scripts.loadgen.request_table  # noqa: F401  (bound before counting)
    import workflow_scripts.outputs.plots_cell  # noqa: F401
    import workflow_scripts.outputs.stats  # noqa: F401
    import workflow_scripts.slo.point  # noqa: F401

    folder = cell_files(BASE)
    records = read_records(folder / "requests.jsonl")
    goal = tmp_path / "goal.json"
    goal.write_text(json.dumps({"tpot_ms": {"percentile": 50, "max": 1000}}))
    out = {
        key: tmp_path / name
        for key, name in (
            ("card_md", "card.md"),
            ("card_html", "card.html"),
            ("latency_plot", "latency.png"),
            ("memory_plot", "memory.png"),
        )
    }
    calls = count_tpot_calls(monkeypatch)
    card = write_card(
        cell_by_id(BASE),
        folder / "metrics.json",
        folder / "requests.jsonl",
        folder / "memory.csv",
        out,
        goal=goal,
    )
    titles = [section.title for section in card.sections]
    assert "Latency goal" in titles and "Intervals and stability (this run)" in titles
    assert calls[0] == len(records)
