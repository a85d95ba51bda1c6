"""Intervals in the tables: summary.csv's `<figure>_lo/_hi` and `interval_source`, summary.md's
`value ± half-width`, spec_gain's paired interval and verdict. Fixture results (records written
by hand, metrics computed from them) and hand-made rows."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.support.outputs import BASE, DRAFTER, FAILED, FIXTURES, fixture_cells, fixture_metrics
from workflow_scripts.loadgen.records import OK, RequestRecord
from workflow_scripts.loadgen.request_table import request_tables
from workflow_scripts.outputs import spec_gain, tables, writers
from workflow_scripts.outputs.changes import NO_DIFFERENCE
from workflow_scripts.outputs.compact import compact_view, summary_row


@pytest.fixture
def records():
    return writers.load_records(sorted((FIXTURES / "cells").glob("*/requests.jsonl")))


def out_paths(tmp_path) -> dict:
    return {
        f"{name}_{ext}": tmp_path / f"{name}.{ext}"
        for name in ("summary", "index", "spec_gain")
        for ext in ("csv", "md")
    }


def test_summary_csv_appends_each_figures_interval_from_a_bootstrap(tmp_path, records):
    metrics = fixture_metrics(tmp_path)
    writers.write_tables(
        list(metrics.values()), fixture_cells(), out_paths(tmp_path), None, records
    )
    rows = pd.read_csv(tmp_path / "summary.csv").set_index("cell")
    base = rows.loc[BASE]
    assert base["interval_source"] == "bootstrap" and base["interval_n"] == 6
    for figure in ("decode_tok_s", "prefill_tok_s", "ttft_median_ms", "tpot_median_ms"):
        assert base[f"{figure}_lo"] <= base[figure] <= base[f"{figure}_hi"], figure
    assert base["ttft_median_ms_lo"] < base["ttft_median_ms_hi"]  # the fixture's TTFTs vary
    assert base["ttft_p99_ms"] == pytest.approx(metrics[BASE]["ttft_ms"]["p99"])
    # no per-request basis for memory: an interval only from repeats
    assert pd.isna(base["peak_mem_gib_lo"])
    # a failed cell has no figures, so no interval
    assert pd.isna(rows.loc[FAILED, "interval_source"])
    assert pd.isna(rows.loc[FAILED, "decode_tok_s_lo"])


def test_summary_md_shows_value_plus_minus_half_width_and_its_source(tmp_path, records):
    metrics = fixture_metrics(tmp_path)
    writers.write_tables(
        list(metrics.values()), fixture_cells(), out_paths(tmp_path), None, records
    )
    csv_row = pd.read_csv(tmp_path / "summary.csv").set_index("cell").loc[BASE]
    text = (tmp_path / "summary.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith(f"| {BASE} "))
    half = (csv_row["decode_tok_s_hi"] - csv_row["decode_tok_s_lo"]) / 2
    assert f"| {csv_row['decode_tok_s']:.2f} ± {half:.2f} " in line
    assert "| bootstrap, 6 requests " in line
    assert "half-width of the figure's 95 % interval" in text.split("| cell")[0]
    header = next(line for line in text.splitlines() if line.startswith("| cell"))
    assert "| interval " in header


def test_compact_view_on_hand_made_rows_with_intervals():
    row = {
        **summary_row({"cell": "a", "status": "done", "decode_tok_s": 50.0}),
        "decode_tok_s_lo": 48.0,
        "decode_tok_s_hi": 53.0,
        "interval_source": "repeats",
        "interval_n": 3,
    }
    plain = summary_row({"cell": "b", "status": "done", "decode_tok_s": 40.0})
    headers, view = compact_view([row, plain])
    assert headers[-2:] == ["interval", "reason"]
    assert view[0]["decode_tok_s"] == "50.00 ± 2.50" and view[0]["interval"] == "3 repeats"
    assert view[1]["decode_tok_s"] == "40.00" and view[1]["interval"] == ""
    assert "interval" not in compact_view([plain])[0]  # no interval anywhere: no column


def test_spec_gain_has_the_paired_interval_and_verdict(tmp_path, records):
    metrics = fixture_metrics(tmp_path)
    writers.write_tables(
        list(metrics.values()), fixture_cells(), out_paths(tmp_path), None, records
    )
    gain = pd.read_csv(tmp_path / "spec_gain.csv").set_index("drafter_cell").loc[DRAFTER]
    assert gain["decode_gain_lo_pct"] <= gain["decode_gain_pct"] <= gain["decode_gain_hi_pct"]
    assert gain["verdict"] in ("faster", "slower", NO_DIFFERENCE)
    assert gain["gain_interval_source"] == "paired randomization, 6 prompts"
    text = (tmp_path / "spec_gain.md").read_text()
    assert "verdict" in text and gain["verdict"] in text


def _run(tpot_s: float, n: int = 30) -> list[RequestRecord]:
    """Sequential requests of 64 tokens with a little jitter."""
    out, sent = [], 0.0
    for i in range(n):
        ttft, tpot = 0.05 + 0.002 * (i % 5), tpot_s * (1 + 0.02 * ((i * 7) % 5 - 2))
        e2e = ttft + 63 * tpot
        out.append(
            RequestRecord(
                index=i,
                prompt_index=i,
                status=OK,
                sent_s=sent,
                ttft_s=ttft,
                e2e_s=e2e,
                prompt_tokens=20,
                completion_tokens=64,
            )
        )
        sent += e2e
    return out


def test_spec_gain_verdict_on_hand_made_records():
    """A drafter that halves TPOT is faster, one that matches its base is not."""
    base = {
        "cell": "m__e__q__none__w",
        "model": "m",
        "engine": "e",
        "quant": "q",
        "drafter": "none",
        "workload": "w",
        "status": "done",
        "decode_tok_s": 1.0,
    }
    fast = {**base, "cell": "m__e__q__fast__w", "drafter": "fast"}
    same = {**base, "cell": "m__e__q__same__w", "drafter": "same"}
    records = {base["cell"]: _run(0.02), fast["cell"]: _run(0.01), same["cell"]: _run(0.02)}
    table = spec_gain.spec_gain_table([base, fast, same], records).set_index("drafter_cell")
    assert table.loc[fast["cell"], "verdict"] == "faster"
    assert table.loc[fast["cell"], "tpot_change_pct"] == pytest.approx(-50, abs=1)
    assert table.loc[same["cell"], "verdict"] == NO_DIFFERENCE
    # without records there is nothing to pair: no interval, no verdict
    assert pd.isna(spec_gain.spec_gain_table([base, fast]).loc[0, "verdict"])


def test_decode_figure_draws_error_bars_and_spec_gain_figure_its_interval(tmp_path, records):
    from matplotlib.container import BarContainer

    from workflow_scripts.outputs import plots

    def bar_container(fig):
        return next(c for c in fig.axes[0].containers if isinstance(c, BarContainer))

    cells = fixture_cells()
    merged = tables.merge_with_cells(list(fixture_metrics(tmp_path).values()), cells)
    summary = tables.summary_table(merged, cells, request_tables(records))
    fig = plots.decode_throughput_figure(summary)
    bars = bar_container(fig)
    assert bars.errorbar is not None  # xerr drawn
    segments = bars.errorbar.lines[2][0].get_segments()
    row = summary.set_index("cell").loc[BASE]
    spans = {(round(s[0][0], 6), round(s[1][0], 6)) for s in segments}
    assert (round(row["decode_tok_s_lo"], 6), round(row["decode_tok_s_hi"], 6)) in spans
    gains = spec_gain.spec_gain_table(merged, records)
    texts = [t.get_text() for t in plots.spec_gain_figure(gains).axes[0].texts]
    gain = gains.iloc[0]
    assert any(f"[{gain['decode_gain_lo_pct']:+.1f}, " in t for t in texts), texts
    # without records: plain bars, as before
    plain = plots.decode_throughput_figure(tables.summary_table(merged, cells))
    assert bar_container(plain).errorbar is None


def test_summary_flags_a_cell_whose_throughput_drifted(tmp_path):
    from workflow_scripts.loadgen.metrics import compute_metrics

    steady = _run(0.02, n=40)
    drifting, sent = [], 0.0
    for r in _run(0.02, n=40):  # the first four requests three times slower per token
        e2e = r.e2e_s if r.index >= 4 else r.ttft_s + 3 * (r.e2e_s - r.ttft_s)
        drifting.append(
            RequestRecord(
                index=r.index,
                prompt_index=r.prompt_index,
                status=OK,
                sent_s=sent,
                ttft_s=r.ttft_s,
                e2e_s=e2e,
                prompt_tokens=20,
                completion_tokens=64,
            )
        )
        sent += e2e
    identity = {"model": "m", "engine": "e", "quant": "q", "drafter": "none", "status": "done"}
    metrics = [
        {**identity, **compute_metrics(steady), "cell": "m__e__q__none__a", "workload": "a"},
        {**identity, **compute_metrics(drifting), "cell": "m__e__q__none__b", "workload": "b"},
    ]
    records = {"m__e__q__none__a": steady, "m__e__q__none__b": drifting}
    writers.write_tables(metrics, [], out_paths(tmp_path), None, records)
    rows = pd.read_csv(tmp_path / "summary.csv").set_index("cell")
    assert not rows.loc["m__e__q__none__a", "unstable"]
    assert rows.loc["m__e__q__none__b", "unstable"]
    first, last = rows.loc["m__e__q__none__b", ["stability_first_tok_s", "stability_last_tok_s"]]
    assert last > 2 * first
    intro = (tmp_path / "summary.md").read_text().split("| cell")[0]
    assert "Throughput not steady within the run" in intro
    assert "`m__e__q__none__b`: decode tok/s moved +" in intro
    assert "m__e__q__none__a" not in intro
