"""Intervals and paired comparisons (workflow_scripts.outputs.stats) on seeded synthetic runs whose
true figures are known: coverage over many simulated experiments, a planted 10 % speed-up found, no
difference reported between two runs of one distribution."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.records import ERROR, OK, RequestRecord
from workflow_scripts.loadgen.request_table import RequestTable
from workflow_scripts.outputs import changes as change_stats
from workflow_scripts.outputs import stability, stats


def bootstrap(records, **kwargs):
    """A run's bootstrap intervals, from its records' table as the card and the summary make it."""
    return stats.bootstrap_intervals(stats.request_arrays(RequestTable.of(records)), **kwargs)


def steadiness(records, **kwargs):
    """A run's stability check, from its records' table and its arrays (as the card's)."""
    table = RequestTable.of(records)
    return stability.stability(table, stats.request_arrays(table), **kwargs)


TTFT_MEDIAN_MS = 100.0
TPOT_MEDIAN_MS = 20.0


def simulate_run(rng, n=100, concurrency=1, tpot_scale=1.0, completion=None, noise=0.2):
    """A closed-loop run: lognormal TTFT (median 100 ms) and per-request TPOT (median 20 ms
    × tpot_scale), completion tokens uniform 20..199 unless given (the same prompts)."""
    tokens = completion if completion is not None else rng.integers(20, 200, size=n)
    ttft = TTFT_MEDIAN_MS / 1000 * np.exp(rng.normal(0, 0.3, size=n))
    tpot = tpot_scale * TPOT_MEDIAN_MS / 1000 * np.exp(rng.normal(0, noise, size=n))
    e2e = ttft + (tokens - 1) * tpot
    free = [0.0] * concurrency
    records = []
    for i in range(n):
        worker = int(np.argmin(free))
        sent, free[worker] = free[worker], free[worker] + e2e[i]
        records.append(
            RequestRecord(
                index=i,
                prompt_index=i,
                status=OK,
                sent_s=sent,
                ttft_s=float(ttft[i]),
                e2e_s=float(e2e[i]),
                prompt_tokens=50,
                completion_tokens=int(tokens[i]),
            )
        )
    return records


def test_t_interval_matches_a_hand_computation():
    interval = stats.t_interval([10.0, 12.0, 14.0])
    # mean 12, s = 2, t(2) = 4.303: 12 ± 4.303 * 2 / sqrt(3)
    assert interval.value == pytest.approx(12.0)
    assert interval.half_width == pytest.approx(4.303 * 2 / math.sqrt(3))
    assert (interval.source, interval.n) == (stats.REPEATS, 3)
    assert stats.interval_from_repeats([10.0, 12.0]) is None  # two repeats: not enough
    assert stats.t975(60) == pytest.approx(2.000, abs=1e-3)  # beyond the table
    assert stats.t975(120) == pytest.approx(1.980, abs=1e-3)


def test_repeats_interval_covers_the_true_mean_95_percent_of_the_time():
    rng = np.random.default_rng(18)
    true_mean, experiments = 55.0, 4000
    hits = 0
    for _ in range(experiments):
        interval = stats.t_interval(rng.normal(true_mean, 3.0, size=3))
        hits += interval.lo <= true_mean <= interval.hi
    assert 0.93 <= hits / experiments <= 0.97


def test_bootstrap_intervals_cover_the_true_figures_95_percent_of_the_time():
    """Decode tok/s of a sequential run (its expected value estimated from the experiments
    themselves) and the TTFT / TPOT medians (known from the generating distributions)."""
    rng = np.random.default_rng(20)
    runs = [simulate_run(rng) for _ in range(800)]  # 800: the rate's noise is ±0.8 % (1 SE)
    truth = {
        "decode_tok_s": float(np.mean([compute_metrics(r)["decode_tok_s"] for r in runs])),
        "ttft_median_ms": TTFT_MEDIAN_MS,
        "tpot_median_ms": TPOT_MEDIAN_MS,
    }
    hits = dict.fromkeys(truth, 0)
    for run in runs:
        intervals = bootstrap(run, resamples=500)
        for name, value in truth.items():
            hits[name] += intervals[name].lo <= value <= intervals[name].hi
    coverage = {name: count / len(runs) for name, count in hits.items()}
    assert all(0.93 <= c <= 0.97 for c in coverage.values()), coverage


def test_bootstrap_point_values_are_the_headline_figures():
    run = simulate_run(np.random.default_rng(3), concurrency=4)
    run.append(RequestRecord(index=100, prompt_index=100, status=ERROR, sent_s=0.5, e2e_s=0.1))
    metrics = compute_metrics(run)
    intervals = bootstrap(run, resamples=200)
    for name, key in [("decode_tok_s", None), ("prefill_tok_s", None), ("req_per_s", None)]:
        assert intervals[name].value == pytest.approx(metrics[key or name])
    assert intervals["ttft_median_ms"].value == pytest.approx(metrics["ttft_ms"]["median"])
    assert intervals["tpot_p99_ms"].value == pytest.approx(metrics["tpot_ms"]["p99"])
    assert intervals["e2el_median_ms"].value == pytest.approx(metrics["e2el_ms"]["median"])
    for interval in intervals.values():
        assert interval.lo < interval.value < interval.hi
        assert (interval.source, interval.n) == (stats.BOOTSTRAP, 100)
    # seeded: the same records give the same interval
    again = bootstrap(run, resamples=200)
    assert again["decode_tok_s"] == intervals["decode_tok_s"]


def test_bootstrap_of_one_request_has_no_interval():
    run = simulate_run(np.random.default_rng(4), n=1)
    interval = bootstrap(run)["decode_tok_s"]
    assert interval.value is not None and interval.lo is None and interval.half_width is None


def test_nan_percentile_matches_the_metrics_percentile():
    values = np.array([[3.0, np.nan, 1.0, 2.0, 10.0], [np.nan] * 5])
    out = stats.nan_percentile(values, 50)
    assert out[0] == pytest.approx(np.percentile([3.0, 1.0, 2.0, 10.0], 50))
    assert math.isnan(out[1])
    assert stats.nan_percentile(values, 99)[0] == pytest.approx(
        np.percentile([3.0, 1.0, 2.0, 10.0], 99)
    )


def _paired_trials(trials, tpot_scale, seed):
    rng = np.random.default_rng(seed)
    verdicts = {name: [] for name in ("decode_tok_s", "tpot_median_ms", "ttft_median_ms")}
    for _ in range(trials):
        tokens = rng.integers(20, 200, size=100)  # the same prompts, the same answers
        base = simulate_run(rng, completion=tokens, noise=0.1)
        new = simulate_run(rng, completion=tokens, noise=0.1, tpot_scale=tpot_scale)
        changes = change_stats.paired_changes(base, new, resamples=1000)
        for name in verdicts:
            verdicts[name].append(changes[name].verdict)
    return verdicts


def test_paired_comparison_detects_a_planted_ten_percent_speed_up():
    verdicts = _paired_trials(200, tpot_scale=1 / 1.1, seed=11)
    for name in ("decode_tok_s", "tpot_median_ms"):
        assert verdicts[name].count(change_stats.FASTER) / 200 >= 0.95, name
    # TTFT was not changed: no difference there
    assert verdicts["ttft_median_ms"].count(change_stats.NO_DIFFERENCE) / 200 >= 0.93


def _as_run(records):
    """The records replayed one after another from t = 0, as a concurrency-1 run serves them."""
    out, sent = [], 0.0
    for r in sorted(records, key=lambda r: r.index):
        out.append(
            RequestRecord(
                index=r.index,
                prompt_index=r.prompt_index,
                status=r.status,
                sent_s=sent,
                ttft_s=r.ttft_s,
                e2e_s=r.e2e_s,
                prompt_tokens=r.prompt_tokens,
                completion_tokens=r.completion_tokens,
            )
        )
        sent += r.e2e_s
    return out


@pytest.mark.parametrize("lengths", ["uniform", "heavy-tailed"])
def test_paired_rate_change_says_no_difference_for_95_percent_of_relabelings(lengths):
    """Two runs of one distribution: each prompt's two requests could as well have been served
    the other way round, so every relabeling of the pairs is an equally likely outcome. The
    rate's verdict must be `no detectable difference` for ≥ 95 % of them, on any data: that is
    what makes the false-alarm rate ≤ 5 % by construction rather than on average. Checked here
    on every relabeling of the test's own group (256), for one data set of each shape."""
    rng = np.random.default_rng(40 if lengths == "uniform" else 41)
    if lengths == "uniform":
        tokens = rng.integers(20, 200, size=60)
    else:  # a few very long answers carry most of the time (ShareGPT-like)
        tokens = np.minimum(20 + rng.pareto(1.2, size=60) * 60, 2000).astype(int)
    base = simulate_run(rng, n=60, completion=tokens, noise=0.1)
    new = simulate_run(rng, n=60, completion=tokens, noise=0.1)
    swaps = change_stats.relabeling_swaps(60, 256)
    assert not swaps[0].any() and len({row.tobytes() for row in swaps}) == 256  # a group
    calls = []
    for swap in swaps:
        b = _as_run([n if s else o for o, n, s in zip(base, new, swap, strict=True)])
        m = _as_run([o if s else n for o, n, s in zip(base, new, swap, strict=True)])
        changes = change_stats.paired_changes(b, m, figures=stats.RATE_FIGURES, relabelings=256)
        calls.append(changes)
    for name in stats.RATE_FIGURES:
        verdicts = [c[name].verdict for c in calls]
        assert verdicts.count(change_stats.NO_DIFFERENCE) >= 0.95 * len(swaps), (name, verdicts)
        assert calls[0][name].source == change_stats.RANDOMIZATION


def test_paired_medians_report_no_difference_between_runs_of_one_distribution():
    """Medians keep a paired bootstrap, which is conservative for them: `no detectable
    difference` in 95.9 ± 0.2 % (TPOT) and 96.1 ± 0.2 % (TTFT) of 8000 simulated pairs while
    this was written; 1000 seeded trials leave 1.5 standard errors of margin."""
    rng = np.random.default_rng(12)
    counts = {"tpot_median_ms": 0, "ttft_median_ms": 0}
    for _ in range(1000):
        tokens = rng.integers(20, 200, size=100)
        base = simulate_run(rng, completion=tokens, noise=0.1)
        new = simulate_run(rng, completion=tokens, noise=0.1)
        changes = change_stats.paired_changes(base, new, figures=tuple(counts), resamples=1000)
        for name in counts:
            counts[name] += changes[name].verdict == change_stats.NO_DIFFERENCE
            assert changes[name].source == stats.BOOTSTRAP
    assert all(c / 1000 >= 0.95 for c in counts.values()), counts


def test_paired_change_uses_only_prompts_both_completed():
    rng = np.random.default_rng(5)
    tokens = rng.integers(20, 200, size=50)
    base = simulate_run(rng, n=50, completion=tokens)
    new = simulate_run(rng, n=50, completion=tokens, tpot_scale=0.5)
    new[0] = RequestRecord(index=0, prompt_index=0, status=ERROR, e2e_s=0.01)
    change = change_stats.paired_changes(base, new, resamples=500)["decode_tok_s"]
    assert change.common_prompts == 49
    assert change.verdict == change_stats.FASTER
    assert change.lo_pct < change.change_pct < change.hi_pct
    latency = change_stats.paired_changes(base, new, resamples=500)["tpot_median_ms"]
    assert latency.change_pct == pytest.approx(-50, abs=10)
    assert latency.verdict == change_stats.FASTER  # lower TPOT is faster


def test_student_t_p_values_match_closed_forms_and_the_table():
    """Two-sided P(|T| >= t): 1 - 2 atan(t) / pi with 1 degree of freedom, 1 - t / sqrt(t^2 + 2)
    with 2; at the tabled 97.5 % quantiles, 5 %; a normal's beyond 10^7."""
    for t in (0.0, 0.5, 1.0, 3.0, 12.7):
        assert stats.t_two_sided_p(t, 1) == pytest.approx(1 - 2 * math.atan(t) / math.pi)
        assert stats.t_two_sided_p(-t, 2) == pytest.approx(1 - t / math.sqrt(t * t + 2))
    for df in (3, 10, 30, 200):
        assert stats.t_two_sided_p(stats.t975(df), df) == pytest.approx(0.05, abs=1e-4)
    assert stats.t_two_sided_p(1.959964, 1e9) == pytest.approx(0.05, abs=1e-6)
    assert stats.t_two_sided_p(math.inf, 4) == 0.0


def test_each_verdict_has_the_p_value_of_its_test_below_five_percent_exactly_when_it_differs():
    """Holm needs each point's p-value: the paired randomization test's is the share of the
    relabelings at least as far apart as the runs measured, the repeats' the Welch t-test's;
    either is below 5 % exactly when the verdict's interval leaves out no change."""
    rng = np.random.default_rng(8)
    for scale in (1.0, 0.97, 0.95, 0.9, 1.05):
        tokens = rng.integers(20, 200, size=40)
        base = simulate_run(rng, n=40, completion=tokens, noise=0.1)
        new = simulate_run(rng, n=40, completion=tokens, noise=0.1, tpot_scale=scale)
        change = change_stats.paired_changes(base, new, figures=("decode_tok_s",))["decode_tok_s"]
        differs = change.verdict != change_stats.NO_DIFFERENCE
        assert (change.p_value < 0.05) is differs, change
        assert 1 / change_stats.RELABELINGS <= change.p_value <= 1
    faster = change_stats.repeat_changes([100.0, 101.0, 99.0], [110.0, 111.0, 109.0], "x")
    # t = 0.1 / sqrt((1/3 + 1.1^2/3) / 100^2) with 4 degrees of freedom (int of Welch's)
    t = 0.1 / math.sqrt((1 / 3 + 1.21 / 3) / 100**2)
    assert faster.p_value == pytest.approx(stats.t_two_sided_p(t, 4))
    assert faster.p_value < 0.05 and faster.verdict == change_stats.FASTER
    same = change_stats.repeat_changes([100.0, 104.0, 96.0], [101.0, 97.0, 103.0], "x")
    assert same.p_value > 0.05 and same.verdict == change_stats.NO_DIFFERENCE
    exact = change_stats.repeat_changes([100.0] * 3, [100.0] * 3, "x")
    assert exact.p_value == 1.0


def test_repeat_changes_from_figures_alone():
    change = change_stats.repeat_changes(
        [100.0, 101.0, 99.0], [110.0, 111.0, 109.0], "decode_tok_s"
    )
    assert change.change_pct == pytest.approx(10.0)
    assert change.verdict == change_stats.FASTER and change.source == stats.REPEATS
    same = change_stats.repeat_changes([100.0, 104.0, 96.0], [101.0, 97.0, 103.0], "decode_tok_s")
    assert same.verdict == change_stats.NO_DIFFERENCE
    slower_latency = change_stats.repeat_changes(
        [10.0, 10.2, 9.8], [12.0, 12.1, 11.9], "ttft_median_ms"
    )
    assert slower_latency.verdict == change_stats.SLOWER


def _slow_start(records, factor):
    """The first tenth of the requests (by send time) `factor` times slower per token; the
    rest of the run shifted so requests still follow each other."""
    shift, out = 0.0, []
    for r in records:
        e2e = r.e2e_s
        if r.index < len(records) // 10:
            e2e = r.ttft_s + (r.e2e_s - r.ttft_s) * factor
        out.append(
            RequestRecord(
                index=r.index,
                prompt_index=r.prompt_index,
                status=OK,
                sent_s=r.sent_s + shift,
                ttft_s=r.ttft_s,
                e2e_s=e2e,
                prompt_tokens=r.prompt_tokens,
                completion_tokens=r.completion_tokens,
            )
        )
        shift += e2e - r.e2e_s
    return out


def test_stability_flags_a_slow_start_and_not_a_steady_run():
    rng = np.random.default_rng(30)
    steady = simulate_run(rng, n=200, noise=0.1)
    found = steadiness(steady, resamples=500)
    assert found is not None and not found.flagged and found.note() == ""
    assert len(found.parts_tok_s) == 10
    warming = steadiness(_slow_start(steady, 2.0), resamples=500)
    assert warming.flagged
    assert warming.change_pct == pytest.approx(100, abs=25)  # the last tenth about twice as fast
    assert "from the first tenth" in warming.note()
    assert steadiness(simulate_run(rng, n=19)) is None  # too few requests a tenth


def test_stability_false_alarms_are_rare():
    """Non-overlapping 95 % intervals are a stricter test than 95 %: a steady run is flagged
    well under 5 % of the time."""
    rng = np.random.default_rng(31)
    flagged = sum(steadiness(simulate_run(rng, n=100), resamples=300).flagged for _ in range(100))
    assert flagged <= 3


def test_resampling_in_chunks_gives_the_same_intervals(monkeypatch):
    run = simulate_run(np.random.default_rng(8), n=50)
    whole = bootstrap(run, resamples=300)
    monkeypatch.setattr(stats, "CHUNK_ELEMENTS", 7 * 50)  # 7 resamples at a time
    assert bootstrap(run, resamples=300) == whole


def _arrays_with_gaps(rng, n):
    """Request arrays with the gaps real runs have: one-token answers (no TPOT), a request with
    no TTFT."""
    records = simulate_run(rng, n=n, concurrency=3)
    records[1].completion_tokens = 1
    records[-1].ttft_s = None
    return stats.request_arrays(RequestTable.of(records))


@pytest.mark.parametrize("n", [2, 9, 200])
def test_the_shared_work_of_the_bootstrap_gives_each_figure_value_for_value(n):
    """figures_of_draws sums the time once and sorts each latency once for all figures: the
    same numbers as each FIGURES function on the same draws (exactly for latencies)."""
    arrays = _arrays_with_gaps(np.random.default_rng(n), n)
    idx = np.random.default_rng(0).integers(0, n, size=(300, n))
    shared = stats.figures_of_draws(arrays, idx, list(stats.FIGURES))
    assert set(shared) == set(stats.FIGURES)
    for name, (figure, _) in stats.FIGURES.items():
        one = figure(arrays, idx)
        assert np.isnan(one).sum() == np.isnan(shared[name]).sum(), name
        if name in stats.QUANTILES:
            np.testing.assert_array_equal(shared[name], one, err_msg=name)
        else:
            np.testing.assert_allclose(shared[name], one, rtol=1e-12, err_msg=name)
    assert not np.isnan(shared["tpot_median_ms"]).all()  # the gaps were resampled, not all


def test_relabelled_rates_as_products_match_the_gathered_index_sets():
    """The randomization test's sides summed by a product with the swap pattern are the sides'
    figures on their index sets (the gathers they replace)."""
    rng = np.random.default_rng(4)
    base, new = _arrays_with_gaps(rng, 60), _arrays_with_gaps(rng, 60)
    pooled = change_stats._pooled(base, new)
    swap = change_stats.relabeling_swaps(60, 256)
    own, other = np.arange(60)[None, :], np.arange(60, 120)[None, :]
    new_side, base_side = np.where(swap, own, other), np.where(swap, other, own)
    sides = change_stats._relabelled_rates(pooled, 60, swap, ["decode_tok_s", "req_per_s"])
    for name, (on_new, on_base) in sides.items():
        figure = stats.FIGURES[name][0]
        np.testing.assert_allclose(on_new, figure(pooled, new_side), rtol=1e-12)
        np.testing.assert_allclose(on_base, figure(pooled, base_side), rtol=1e-12)
    assert not swap[0].any() and swap[1:].any(axis=1).all()  # the identity first, then swaps
    # row r is the XOR of the seeded patterns of r's set bits, as a product of bits says
    patterns = np.random.default_rng(stats.SEED).integers(0, 2, size=(8, 60), dtype=np.int64)
    bits = (np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1
    np.testing.assert_array_equal(swap, (bits @ patterns) % 2 == 1)
    np.testing.assert_array_equal(
        change_stats.relabeling_swaps(60, 256, rows=slice(5, 9)), swap[5:9]
    )


def test_runs_that_cannot_be_paired_resample_each_run_on_its_own():
    """Cells whose prompts come from different datasets: their prompt indices name different
    prompts, so nothing is paired by index, whether the indices overlap or not."""
    rng = np.random.default_rng(6)
    base = simulate_run(rng, n=60)
    faster = simulate_run(rng, n=60, tpot_scale=1 / 1.5)
    disjoint = [dataclasses.replace(r, prompt_index=r.prompt_index + 1000) for r in faster]
    figures = ("decode_tok_s", "tpot_median_ms")
    for new in (faster, disjoint):
        found = change_stats.cell_changes([], [], base, new, figures, same_prompts=False)
        assert (found.method, found.basis) == (change_stats.UNPAIRED, "60 + 60 requests")
        for name in figures:
            change = found.changes[name]
            assert change.source == change_stats.UNPAIRED and change.common_prompts == 0
            assert change.lo_pct < change.change_pct < change.hi_pct, name
            assert change.verdict == change_stats.FASTER, name
