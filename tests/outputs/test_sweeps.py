"""Sweep tables on hand-made points with known figures: each point's row, the frontier (exactly
the non-dominated points, ties and a series owning two stretches included), the drafter's gain
at each point (only against a base series with the same points) and where it stops paying, the
acceptance check, points that did not finish, and the files the rule writes."""

from __future__ import annotations

import csv
import itertools
import math
import random
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.outputs.test_stats import simulate_run
from tests.support.outputs import fixture_cells, results_tree
from tests.support.pipeline import run_snakemake
from tests.support.sweeps import point_cell, point_metrics, series_cells, spread
from workflow_scripts.loadgen.request_table import request_tables
from workflow_scripts.outputs import front_page as front_page_module
from workflow_scripts.outputs import labels, stats, sweeps
from workflow_scripts.outputs.card import build_card, render_markdown
from workflow_scripts.outputs.changes import FASTER, NO_DIFFERENCE, SLOWER
from workflow_scripts.outputs.spec_gain import RANDOM_TOKENS_FLAG
from workflow_scripts.outputs.sweeps.files import write_sweeps
from workflow_scripts.verdicts.bounds import wilson_interval
from workflow_scripts.vocabulary import RANDOM_TOKENS, Status

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOADS = [1, 2, 4, 8]
# The columns other parts and checks read (docs/sweeps.md), and the brief's additions.
SWEEP_CONTRACT = [
    "cell",
    "series",
    "concurrency",
    "request_rate",
    "decode_tok_s",
    "interactivity_tok_s",
    "tpot_median_ms",
    "tpot_p99_ms",
    "ttft_median_ms",
    "ttft_p99_ms",
    "req_per_s",
    "errors",
    "decode_tok_s_lo",
    "decode_tok_s_hi",
    "interactivity_tok_s_lo",
    "tpot_p99_ms_hi",
    "decode_tok_s_per_gpu",
    "server_start",
]
GAIN_CONTRACT = [
    "series",
    "concurrency",
    "decode_gain_pct",
    "decode_gain_lo_pct",
    "decode_gain_hi_pct",
    "verdict",
    "tpot_change_pct",
    "tpot_change_lo_pct",
    "acceptance_rate",
    "acceptance_length",
    "acceptance_differs",
]


def done_series(drafter, decode, tpot, values=LOADS, spec=None, **kwargs):
    """Cells and metrics of one series whose points have the figures given, each point with
    three tight repeats (so every interval, and the spec gain's, comes from them)."""
    cells = series_cells(drafter, values, **kwargs)
    metrics = [
        point_metrics(c, d, t, repeats=spread(d), spec=spec)
        for c, d, t in zip(cells, decode, tpot, strict=True)
    ]
    return cells, metrics


def brute_frontier(points):
    return sorted(
        i
        for i, (x, y) in enumerate(points)
        if not any(
            (a >= x and b >= y and (a > x or b > y)) for j, (a, b) in enumerate(points) if j != i
        )
    )


# --- one row per point ----------------------------------------------------------------------


def test_each_point_has_its_row_with_the_contract_columns_and_known_figures():
    cells, metrics = done_series(False, [10.0, 18.0, 30.0, 45.0], [20.0, 25.0, 40.0, 50.0])
    metrics[2]["server_start"] = {"id": "s1", "position": 3, "pid": 7, "ready_s": 2.0}
    gpus = {cell.id: 2 for cell in cells}
    table = sweeps.sweep_table(metrics, cells, {}, gpus)
    assert set(SWEEP_CONTRACT) <= set(table.columns)
    assert list(table["point"]) == ["c1", "c2", "c4", "c8"]
    assert list(table["concurrency"]) == LOADS
    assert set(table["series"]) == {"tiny-llama__llamacpp-local__q4_0__none__sweep"}
    assert list(table["interactivity_tok_s"]) == pytest.approx([50.0, 40.0, 25.0, 20.0])
    assert list(table["decode_tok_s_per_gpu"]) == pytest.approx([5.0, 9.0, 15.0, 22.5])
    assert list(table["tpot_p99_ms"]) == pytest.approx([40.0, 50.0, 80.0, 100.0])
    row = table.iloc[0]
    # the interval of 1000 / TPOT is the TPOT interval's ends, inverted and swapped
    assert row["interactivity_tok_s_lo"] == pytest.approx(1000 / row["tpot_median_ms_hi"])
    assert row["interactivity_tok_s_hi"] == pytest.approx(1000 / row["tpot_median_ms_lo"])
    assert row["decode_tok_s_lo"] < 10.0 < row["decode_tok_s_hi"]
    assert row["interval_source"] == "repeats"
    assert table.iloc[2]["server_start"] == "s1" and table.iloc[2]["server_start_position"] == 3
    assert table["server_start"].isna().sum() == 3


def test_points_listed_out_of_order_come_out_by_load_and_without_gpus_no_per_gpu_figure():
    cells = [point_cell(False, v) for v in [8, 1, 4]]
    metrics = [point_metrics(c, 10.0 * c.concurrency, 20.0) for c in cells]
    table = sweeps.sweep_table(metrics, cells, {}, {c.id: 0 for c in cells})
    assert list(table["point"]) == ["c1", "c4", "c8"]
    assert table["decode_tok_s_per_gpu"].isna().all() and table["gpus"].isna().all()


def test_failed_blocked_and_unrun_points_are_rows_with_their_status_and_no_figures():
    cells = series_cells(False, LOADS)
    cells[3] = point_cell(False, 8, blocked="needs a GPU")
    metrics = [
        point_metrics(cells[0], 10.0, 20.0),
        point_metrics(cells[1], status=Status.FAILED, reason="ServerError: died"),
        # cells[2] has no metrics.json yet; cells[3] is blocked and never ran
    ]
    table = sweeps.sweep_table(metrics, cells, {})
    assert list(table["status"]) == ["done", "failed", "not run", "blocked"]
    assert table.loc[1:, "decode_tok_s"].isna().all()
    assert table.loc[1:, "interactivity_tok_s"].isna().all()
    assert table.loc[1, "reason"].startswith("ServerError") and table.loc[3, "reason"]
    tables = sweeps.sweep_tables(metrics, cells, {})
    assert list(tables.pareto["cell"]) == [cells[0].id]  # only the finished point


def test_a_request_rate_sweep_names_its_points_by_rate():
    cells = series_cells(False, [0.5, 2.5], axis="request_rate")
    metrics = [point_metrics(c, 10.0, 20.0) for c in cells]
    table = sweeps.sweep_table(metrics, cells, {})
    assert list(table["point"]) == ["r0.5", "r2.5"]
    assert list(table["request_rate"]) == [0.5, 2.5]
    assert set(table["axis"]) == {"request_rate"}


def test_a_point_run_once_gets_the_bootstrap_interval_of_its_requests():
    cell = point_cell(False, 4)
    records = simulate_run(np.random.default_rng(1), n=60, concurrency=4)
    metrics = {**point_metrics(cell, 1.0, 1.0)}
    from workflow_scripts.loadgen.metrics import compute_metrics

    metrics.update(compute_metrics(records))
    table = sweeps.sweep_table([metrics], [cell], request_tables({cell.id: records}))
    row = table.iloc[0]
    assert row["interval_source"] == "bootstrap" and row["interval_n"] == 60
    assert row["decode_tok_s_lo"] < row["decode_tok_s"] < row["decode_tok_s_hi"]
    assert (
        row["interactivity_tok_s_lo"] < row["interactivity_tok_s"] < row["interactivity_tok_s_hi"]
    )


# --- the frontier ---------------------------------------------------------------------------


def test_the_frontier_is_exactly_the_non_dominated_points_ties_included():
    rng = random.Random(3)
    for trial in range(300):
        n = rng.randint(0, 25)
        # a small grid: many equal x, equal y and identical points
        points = [(float(rng.randint(0, 6)), float(rng.randint(0, 6))) for _ in range(n)]
        assert sweeps.pareto_frontier(points) == brute_frontier(points), (trial, points)


def test_the_frontier_of_a_hand_made_set():
    points = [(1, 10), (2, 8), (2, 9), (3, 9), (3, 9), (5, 1), (4, 1), (0.5, 10)]
    # (2, 9) is dominated by (3, 9); the two (3, 9) are both on it; (4, 1) by (5, 1);
    # (0.5, 10) by (1, 10)
    assert sweeps.pareto_frontier(points) == [0, 3, 4, 5]


def test_a_series_that_owns_two_stretches_of_the_frontier():
    """Base: high throughput at low interactivity and again at the far end; the drafter wins in
    the middle: base, drafter, base along the frontier."""
    base, base_m = done_series(False, [10.0, 20.0, 30.0, 40.0], [5.0, 40.0, 50.0, 100.0])
    draft, draft_m = done_series(True, [12.0, 25.0, 28.0, 30.0], [9.0, 20.0, 30.0, 90.0])
    tables = sweeps.sweep_tables(base_m + draft_m, base + draft, {})
    frontier = tables.pareto
    xy = list(zip(tables.sweeps["interactivity_tok_s"], tables.sweeps["decode_tok_s"], strict=True))
    expected = {tables.sweeps["cell"][i] for i in brute_frontier(xy)}
    assert set(frontier["cell"]) == expected
    assert list(frontier["interactivity_tok_s"]) == sorted(frontier["interactivity_tok_s"])
    owners = [s.split("__")[3] for s in frontier["series"]]
    # (interactivity, tok/s): none c8 (10, 40), c4 (20, 30); ngram c4 (33, 28), c2 (50, 25),
    # c1 (111, 12); none c1 (200, 10). Off it: ngram c8 (11, 30) and none c2 (25, 20).
    assert owners == ["none", "none", "ngram", "ngram", "ngram", "none"]
    assert list(frontier["stretch"]) == [1, 1, 2, 2, 2, 3]
    stretches = sweeps.frontier_stretches(frontier)
    assert [s.split("__")[3] for s in stretches["series"]] == ["none", "ngram", "none"]
    assert list(stretches["points"]) == ["c8, c4", "c4, c2, c1", "c1"]
    assert list(frontier.columns[:2]) == ["cell", "series"]


# --- the drafter at each point --------------------------------------------------------------


def gain_tables(base_decode, draft_decode, values=LOADS, spec=None):
    tpot = [20.0] * len(values)
    base, base_m = done_series(False, base_decode, tpot, values)
    draft, draft_m = done_series(True, draft_decode, tpot, values, spec=spec)
    return sweeps.sweep_tables(base_m + draft_m, base + draft, {})


@pytest.mark.parametrize(
    ("draft", "summary", "last", "first", "monotone"),
    [
        ([15, 15, 15, 15], "faster at every point", 8, None, True),
        ([5, 10, 7, 6], "never faster", None, 1, True),
        ([15, 14, 9, 8], "faster up to c2, not from c4", 2, 4, True),
        (
            [15, 10, 15, 8],
            "faster at c1 and c4, not at c2 and c8: no single crossover",
            4,
            2,
            False,
        ),
    ],
)
def test_the_crossover_in_each_case(draft, summary, last, first, monotone):
    tables = gain_tables([10, 10, 10, 10], draft)
    gains = tables.spec_gain_sweep
    assert list(gains["point"]) == ["c1", "c2", "c4", "c8"]
    row = tables.spec_crossover.iloc[0]
    assert row["summary"] == summary
    assert (row["last_faster"], row["first_not_faster"]) == (last, first)
    assert bool(row["monotone"]) is monotone
    if last is not None:
        at = gains[gains["concurrency"] == last].iloc[0]
        assert row["last_faster_gain_lo_pct"] == at["decode_gain_lo_pct"] > 0
    if first is not None:
        at = gains[gains["concurrency"] == first].iloc[0]
        assert row["first_not_faster_gain_pct"] == at["decode_gain_pct"]
        assert row["first_not_faster_verdict"] in (SLOWER, NO_DIFFERENCE)
    assert row["interval_source"] == "repeats, 3 + 3 runs"


def test_a_series_on_random_tokens_is_labelled_at_each_point_and_in_its_crossover():
    """A drafter's gain on random prompts is not its gain on text: each point's flags and the
    series' crossover say so; on text neither does."""
    tpot = [20.0] * len(LOADS)
    base, base_m = done_series(False, [10] * len(LOADS), tpot)
    draft, draft_m = done_series(True, [15] * len(LOADS), tpot)
    random_m = [{**m, "content": RANDOM_TOKENS} for m in draft_m]
    tables = sweeps.sweep_tables(base_m + random_m, base + draft, {})
    assert all(RANDOM_TOKENS_FLAG in flags for flags in tables.spec_gain_sweep["flags"])
    crossover = tables.spec_crossover.iloc[0]["summary"]
    assert crossover == f"faster at every point; {RANDOM_TOKENS_FLAG}"
    on_text = sweeps.sweep_tables(base_m + draft_m, base + draft, {})
    assert on_text.spec_crossover.iloc[0]["summary"] == "faster at every point"


def test_the_gain_row_has_spec_gains_gain_verdict_and_tpot_change():
    tables = gain_tables([10, 10, 10, 10], [15, 10, 10, 5])
    gains = tables.spec_gain_sweep
    assert list(gains["decode_gain_pct"]) == pytest.approx([50.0, 0.0, 0.0, -50.0])
    assert list(gains["verdict"]) == [FASTER, NO_DIFFERENCE, NO_DIFFERENCE, SLOWER]
    assert (gains["decode_gain_lo_pct"] < gains["decode_gain_pct"]).all()
    assert (gains["decode_gain_hi_pct"] > gains["decode_gain_pct"]).all()
    assert gains["tpot_change_pct"].notna().all()
    assert set(gains["base_series"]) == {"tiny-llama__llamacpp-local__q4_0__none__sweep"}
    assert set(GAIN_CONTRACT) <= set(gains.columns)


def test_the_gain_table_pairs_only_series_with_the_same_points():
    """q4_0's drafter series has a fifth point its base lacks: no rows, and its crossover row
    says why; q8_0's two series share their points and pair."""
    base, base_m = done_series(False, [10] * 4, [20.0] * 4)
    draft, draft_m = done_series(True, [15] * 5, [20.0] * 5, values=[*LOADS, 16])
    base8, base8_m = done_series(False, [10] * 4, [20.0] * 4, quant="q8_0")
    draft8, draft8_m = done_series(True, [15] * 4, [20.0] * 4, quant="q8_0")
    lonely, lonely_m = done_series(True, [15] * 2, [20.0] * 2, values=[1, 2], workload="other")
    cells = base + draft + base8 + draft8 + lonely
    tables = sweeps.sweep_tables(base_m + draft_m + base8_m + draft8_m + lonely_m, cells, {})
    gains = tables.spec_gain_sweep
    assert set(gains["series"]) == {draft8[0].sweep.series}
    assert list(gains["point"]) == ["c1", "c2", "c4", "c8"]
    crossover = tables.spec_crossover.set_index("series")
    assert len(crossover) == 3
    assert crossover.loc[draft[0].sweep.series, "summary"].startswith(sweeps.NO_BASE)
    assert "c16" in crossover.loc[draft[0].sweep.series, "summary"]
    assert crossover.loc[lonely[0].sweep.series, "summary"].startswith(sweeps.NO_BASE)
    assert crossover.loc[draft8[0].sweep.series, "summary"] == "faster at every point"
    assert pd.isna(crossover.loc[draft[0].sweep.series, "last_faster"])


def test_a_failed_point_gets_no_verdict_and_the_crossover_skips_it():
    base, base_m = done_series(False, [10] * 4, [20.0] * 4)
    draft, draft_m = done_series(True, [15, 15, 15, 8], [20.0] * 4)
    draft_m[2] = point_metrics(draft[2], status=Status.FAILED, reason="OOM")
    del base_m[3]  # the base's c8 never ran: its pair has no verdict either
    tables = sweeps.sweep_tables(base_m + draft_m, base + draft, {})
    gains = tables.spec_gain_sweep
    assert list(gains["verdict"].fillna("")) == [FASTER, FASTER, "", ""]
    assert "did not finish" in gains["flags"].iloc[2]
    assert gains["acceptance_rate"].isna().iloc[2]
    row = tables.spec_crossover.iloc[0]
    assert row["summary"] == "faster at every point; no verdict at c4 and c8"
    assert row["last_faster"] == 2 and pd.isna(row["first_not_faster"])


def test_a_paired_gain_from_the_points_requests():
    """No repeats: the interval is spec_gain's paired randomization over the prompts."""
    rng = np.random.default_rng(5)
    completion = rng.integers(20, 200, size=60)
    base, draft = point_cell(False, 4), point_cell(True, 4)
    base_records = simulate_run(rng, n=60, concurrency=4, completion=completion)
    draft_records = simulate_run(rng, n=60, concurrency=4, completion=completion, tpot_scale=0.6)
    from workflow_scripts.loadgen.metrics import compute_metrics

    metrics = [
        {**point_metrics(cell, 1.0, 1.0), **compute_metrics(records)}
        for cell, records in ((base, base_records), (draft, draft_records))
    ]
    records = {base.id: base_records, draft.id: draft_records}
    tables = sweeps.sweep_tables(metrics, [base, draft], records)
    row = tables.spec_gain_sweep.iloc[0]
    assert row["verdict"] == FASTER and row["decode_gain_lo_pct"] > 0
    assert row["gain_interval_source"].startswith("paired randomization")
    assert tables.spec_crossover.iloc[0]["summary"] == "faster at every point"


# --- acceptance -----------------------------------------------------------------------------


def test_a_point_whose_acceptance_leaves_the_series_is_flagged_and_only_it():
    def spec(rate):
        return {
            "acceptance_rate": rate,
            "mean_acceptance_length": 1 + 3 * rate,
            "draft_tokens": 4000,
            "accepted_tokens": 4000 * rate,
        }

    base, base_m = done_series(False, [10] * 4, [20.0] * 4)
    draft, draft_m = done_series(True, [15] * 4, [20.0] * 4)
    for m, rate in zip(draft_m, [0.50, 0.51, 0.30, 0.50], strict=True):
        m["spec"] = spec(rate)
    gains = sweeps.sweep_tables(base_m + draft_m, base + draft, {}).spec_gain_sweep
    assert list(gains["acceptance_differs"]) == [False, False, True, False]
    assert "0.300" in gains["acceptance_note"].iloc[2] and gains["acceptance_note"].iloc[0] == ""
    assert gains["acceptance_interval_source"].str.startswith("Wilson").all()
    assert (gains["acceptance_rate_lo"] < gains["acceptance_rate"]).all()
    assert list(gains["acceptance_length"]) == pytest.approx([2.5, 2.53, 1.9, 2.5])


def test_acceptance_interval_from_the_requests_drafts_when_they_have_them():
    cell = point_cell(True, 4)
    records = simulate_run(np.random.default_rng(2), n=40, concurrency=4)
    for i, record in enumerate(records):
        record.timings = {"draft_n": 20, "draft_n_accepted": 5 + i % 11}
    accepted = sum(5 + i % 11 for i in range(40)) / (20 * 40)
    metrics = point_metrics(cell, 10.0, 20.0, spec={"acceptance_rate": accepted})
    lo, hi, source = sweeps.acceptance_interval(metrics, records)
    assert source == "40 requests' drafts"
    # equal drafts a request: the mean of the per-request rates ± t·s/√n
    per_request = np.array([(5 + i % 11) / 20 for i in range(40)])
    half = stats.t975(39) * per_request.std(ddof=1) / math.sqrt(40)
    assert (lo, hi) == pytest.approx((accepted - half, accepted + half))
    # the counters said 10 % more than the responses: the interval moves with the headline
    metrics["spec"]["acceptance_rate"] = 1.1 * accepted
    lo2, hi2, _ = sweeps.acceptance_interval(metrics, records)
    assert (lo2, hi2) == pytest.approx((1.1 * lo, 1.1 * hi))
    assert sweeps.acceptance_interval(point_metrics(cell, 10.0, 20.0, spec={}), records)[2] == ""


def test_the_acceptance_interval_over_requests_covers_the_true_rate():
    """Requests of uneven length whose drafts are accepted in runs (a request's drafts go
    together): the interval over requests holds the true rate in about 95 % of runs, where
    Wilson's over the drafted tokens, too narrow, holds it far less often."""
    rng = np.random.default_rng(11)
    held = wilson_held = 0
    for _ in range(400):
        drafted = rng.integers(10, 200, size=30).astype(float)
        easy = rng.random(30) < 0.5  # half the prompts are easy to draft for
        accepted = rng.binomial(drafted.astype(int), np.where(easy, 0.8, 0.2)).astype(float)
        lo, hi = stats.ratio_interval(accepted, drafted)
        held += lo <= 0.5 <= hi
        w_lo, w_hi = wilson_interval(accepted.sum(), drafted.sum())
        wilson_held += w_lo <= 0.5 <= w_hi
    assert 0.90 <= held / 400 <= 0.99
    assert wilson_held / 400 < 0.5


def test_published_figures_sit_beside_the_measured_gain():
    base = [point_cell(False, v, reference={"decode_tok_s": 100.0}) for v in [1, 2]]
    draft = [
        point_cell(True, v, reference={"decode_tok_s": 150.0, "acceptance_rate": 0.6})
        for v in [1, 2]
    ]
    metrics = [point_metrics(c, 10.0, 20.0, repeats=spread(10.0)) for c in base + draft]
    gains = sweeps.sweep_tables(metrics, base + draft, {}).spec_gain_sweep
    assert list(gains["ref_decode_gain_pct"]) == pytest.approx([50.0, 50.0])
    assert list(gains["ref_acceptance_rate"]) == [0.6, 0.6]
    assert list(gains["ref_base_decode_tok_s"]) == [100.0, 100.0]
    assert sweeps.reference_note(gains)


# --- files, figures, wiring, cards ----------------------------------------------------------


def outputs_under(folder: Path) -> dict[str, Path]:
    out = {}
    for name in labels.SWEEP_TABLES:
        out[f"{name}_csv"], out[f"{name}_md"] = folder / f"{name}.csv", folder / f"{name}.md"
    out["sweeps_html"] = folder / "sweeps.html"
    for key, name in (
        ("pareto", "pareto"),
        ("latency", "sweep_latency"),
        ("spec_gain", "spec_gain_sweep"),
    ):
        out[f"{key}_plot"] = folder / f"{name}.png"
    return out


def header(path: Path) -> list[str]:
    return next(csv.reader(path.read_text().splitlines()))


def test_the_rule_body_writes_every_file_with_the_contract_columns(tmp_path):
    base, base_m = done_series(False, [10.0, 18.0, 30.0, 45.0], [20.0, 25.0, 40.0, 50.0])
    draft, draft_m = done_series(True, [15.0, 20.0, 28.0, 40.0], [15.0, 20.0, 42.0, 60.0])
    draft_m[3] = point_metrics(draft[3], status=Status.FAILED, reason="ServerError: boom")
    for m in draft_m[:3]:
        m["spec"] = {"acceptance_rate": 0.5, "mean_acceptance_length": 2.5}
    cells = base + draft
    out = outputs_under(tmp_path)
    write_sweeps(base_m + draft_m, cells, {}, {}, out)
    for path in out.values():
        assert path.stat().st_size > 0, path
    for key in ("pareto_plot", "latency_plot", "spec_gain_plot"):
        assert out[key].read_bytes()[:8] == PNG_MAGIC
        assert b"<svg" in out[key].with_suffix(".svg").read_bytes()[:2000]
    assert not list(tmp_path.glob(".plot-*"))
    assert header(out["sweeps_csv"])[:2] == ["cell", "series"]
    assert set(SWEEP_CONTRACT) <= set(header(out["sweeps_csv"]))
    assert header(out["pareto_csv"])[:2] == ["cell", "series"]
    assert {"interactivity_tok_s", "decode_tok_s", "stretch"} <= set(header(out["pareto_csv"]))
    assert set(GAIN_CONTRACT) <= set(header(out["spec_gain_sweep_csv"]))
    crossover_columns = header(out["spec_crossover_csv"])
    assert crossover_columns[0] == "series"
    assert {"last_faster", "first_not_faster", "summary"} <= set(crossover_columns)
    crossover = list(csv.DictReader(out["spec_crossover_csv"].read_text().splitlines()))
    assert crossover[0]["summary"] == "faster up to c2, not from c4; no verdict at c8"
    assert crossover[0]["last_faster"] == "2" and crossover[0]["first_not_faster"] == "4"
    text = out["sweeps_md"].read_text()
    assert "### tiny-llama__llamacpp-local__q4_0__ngram__sweep" in text
    assert "c8: failed (ServerError: boom)" in text
    assert "Speculative decoding against its base: faster up to c2" in text
    assert "Who owns each stretch" in out["pareto_md"].read_text()
    html = out["sweeps_html"].read_text()
    assert "Each series" in html and "Where a drafter stops paying" in html


def front_page(answers) -> str:
    index = pd.DataFrame({"Configuration": ["a cell"]})
    return front_page_module.overview_fragment(index, [], ["intro"], [str(p) for p in answers])


def test_the_front_page_answers_where_the_drafter_stops_paying_with_its_figures(tmp_path):
    base, base_m = done_series(False, [10.0, 18.0, 30.0, 45.0], [20.0, 25.0, 40.0, 50.0])
    draft, draft_m = done_series(True, [15.0, 20.0, 28.0, 40.0], [15.0, 20.0, 42.0, 60.0])
    out = outputs_under(tmp_path)
    write_sweeps(base_m + draft_m, base + draft, {}, {}, out)
    summary = [f"results/summary/{name}" for name in labels.sweep_outputs(base + draft)]
    shown = labels.front_page_files(summary)
    assert sorted(Path(p).name for p in shown) == [
        "energy_frontier.png",  # shown under "What a token costs" where energy was measured
        "pareto.png",
        "spec_crossover.csv",
        "spec_gain_sweep.png",
    ]
    html = front_page(tmp_path / Path(p).name for p in shown)
    sweeps_at, figures_at = html.index("<h2>Load sweeps</h2>"), html.index("<h2>Figures</h2>")
    assert html.index("<h2>Index</h2>") < sweeps_at < figures_at  # before the cells' figures
    section = html[sweeps_at:figures_at]
    assert "Where a drafter stops paying" in section
    row = re.search(r"<tr><td>[^<]*__ngram__sweep</td>(.*?)</tr>", section).group(1)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row)
    assert cells == ["concurrency", "2", "4", "faster up to c2, not from c4"]  # 2, not 2.0
    assert section.count('src="data:image/png;base64,') == 2
    assert 'alt="The drafter&#x27;s gain across load"' in section
    # a sweep without a drafter has no crossover: the frontier alone, under its heading
    write_sweeps(base_m, base, {}, {}, out)
    html = front_page(tmp_path / Path(p).name for p in shown)
    assert "<h2>Load sweeps</h2>" in html and "Where a drafter stops paying" not in html
    assert html.count('src="data:image/png;base64,') == 1
    assert 'alt="Throughput against interactivity: the frontier"' in html
    assert front_page([]).count("<h2>") == 2  # no sweep, no search: the index and figures


def test_the_figures_say_why_when_there_is_nothing_to_draw(tmp_path):
    from workflow_scripts.outputs.sweeps import plots as plots_sweeps

    cells = series_cells(False, [1, 2])
    metrics = [point_metrics(c, status=Status.FAILED, reason="x") for c in cells]
    tables = sweeps.sweep_tables(metrics, cells, {})
    for fig in (
        plots_sweeps.pareto_figure(tables.sweeps, tables.pareto),
        plots_sweeps.sweep_latency_figure(tables.sweeps),
        plots_sweeps.spec_gain_sweep_figure(tables.spec_gain_sweep),
    ):
        texts = [t.get_text() for ax in fig.axes for t in ax.texts]
        assert any(texts), "a figure with nothing to show says why"
    assert tables.spec_gain_sweep.empty and tables.spec_crossover.empty


def test_the_pareto_figure_draws_a_line_per_series_the_frontier_and_the_labels():
    from workflow_scripts.outputs.sweeps import plots as plots_sweeps

    base, base_m = done_series(False, [10.0, 20.0, 30.0, 40.0], [5.0, 40.0, 50.0, 100.0])
    draft, draft_m = done_series(True, [12.0, 25.0, 28.0, 30.0], [9.0, 20.0, 30.0, 90.0])
    tables = sweeps.sweep_tables(base_m + draft_m, base + draft, {})
    fig = plots_sweeps.pareto_figure(tables.sweeps, tables.pareto)
    ax = fig.axes[0]
    lines = [line.get_label() for line in ax.get_lines()]
    assert len(lines) == 3 and lines[-1].startswith("frontier")
    assert sorted(t.get_text() for t in ax.texts) == sorted(["c1", "c2", "c4", "c8"] * 2)
    assert ax.get_xlabel().startswith("interactivity") and ax.get_ylabel().startswith("decode")
    gain = plots_sweeps.spec_gain_sweep_figure(tables.spec_gain_sweep)
    assert any(line.get_ydata()[0] == 0 for line in gain.axes[0].get_lines())  # the 0 line
    assert gain.axes[0].collections, "the interval band"


def test_sweep_outputs_only_for_a_matrix_with_a_sweep_and_they_are_the_rules_outputs():
    """The sweeps rule declares labels.RULE_FILES["sweeps"] (tests/workflow/test_dag.py checks it
    does): sweep_outputs lists those files, and every key the sweep writer fills is one of them."""
    assert labels.sweep_outputs(fixture_cells()) == []
    assert labels.sweep_cell_ids(fixture_cells()) == []
    cells = [*fixture_cells(), point_cell(False, 2)]
    names = labels.sweep_outputs(cells)
    assert labels.sweep_cell_ids(cells) == [point_cell(False, 2).id]
    rule = {file.key: file.path for file in labels.RULE_FILES["sweeps"]}
    assert names == [path.removeprefix("summary/") for path in rule.values()]
    assert set(outputs_under(Path("x"))) <= set(rule)


def test_a_points_card_names_its_series_and_server_start():
    cell = point_cell(True, 8)
    start = {"id": "srv-1", "position": 4, "pid": 4242, "ready_s": 3.25, "started_at": "t0"}
    metrics = point_metrics(cell, 10.0, 20.0, server_start=start)
    text = render_markdown(build_card(cell, metrics))
    assert "| Sweep | a point of workload sweep's concurrency sweep (concurrency 8)" in text
    assert "series tiny-llama__llamacpp-local__q4_0__ngram__sweep" in text
    assert "| Server start | srv-1, position 4 among the points it served, pid 4242" in text
    plain = render_markdown(build_card(fixture_cells()[0], point_metrics(cell, 1.0, 1.0)))
    assert "| Sweep |" not in plain and "| Server start |" not in plain


def test_every_combination_of_verdicts_reads_as_one_of_the_summaries():
    """Over every pattern of four verdicts: the summary names the crossover exactly when the
    faster points all come first."""
    labels_ = ["c1", "c2", "c4", "c8"]
    for verdicts in itertools.product([FASTER, SLOWER, NO_DIFFERENCE, None], repeat=4):
        text = sweeps.crossover_summary(list(zip(labels_, verdicts, strict=True)))
        judged = [v for v in verdicts if v]
        flags = [v == FASTER for v in judged]
        if not judged:
            assert text == sweeps.NO_VERDICT
        elif all(flags):
            assert text.startswith(sweeps.EVERY_POINT)
        elif not any(flags):
            assert text.startswith(sweeps.NEVER)
        elif flags == sorted(flags, reverse=True):
            assert text.startswith("faster up to"), text
        else:
            assert "no single crossover" in text, text
        assert ("; no verdict at" in text) == (None in verdicts and bool(judged))


def test_a_matrix_without_a_sweep_plans_no_sweeps_job(tmp_path):
    """The fixture matrix (one cell at a second concurrency, but no list: no sweep) through a
    real dry run: the report's other jobs are planned, the sweeps rule is not."""
    results_tree(tmp_path)
    proc = run_snakemake(tmp_path, "-n", "--quiet", "rules", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    planned = {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}
    assert {"aggregate", "html_report"} <= planned, planned
    assert "sweeps" not in planned


def test_a_points_label_is_the_name_its_cell_id_ends_in_at_any_load():
    """sweeps.csv's `point` and the cell id spell a point one way (vocabulary.point_part),
    a rate of a million requests/s (`:g` would write `1e+06`) too."""
    from tests.config.test_sweeps_config import cells_of, sweep_config

    cells = cells_of(sweep_config(request_rate=[2.5, 10, 1_000_000]))
    table = sweeps.sweep_table([], cells)
    assert len(table) == len(cells) == 6
    for row in table.to_dict("records"):
        assert row["cell"].endswith(f"-{row['point']}"), (row["cell"], row["point"])
    assert set(table["point"]) == {"r2.5", "r10", "r1000000"}
