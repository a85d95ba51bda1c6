"""Figures: each written as PNG + SVG, titled and labelled, drawn from the same records the
metrics come from; figures with nothing to show say so."""

from __future__ import annotations

import statistics

import pandas as pd
import pytest

from tests.support.outputs import (
    BASE,
    BASE_C4,
    DRAFTER,
    FAILED,
    cell_files,
    fixture_cells,
    fixture_metrics,
)
from workflow_scripts.loadgen.records import read_records
from workflow_scripts.loadgen.request_table import RequestTable
from workflow_scripts.outputs import plots, plots_cell
from workflow_scripts.outputs.spec_gain import SPEC_GAIN_COLUMNS, spec_gain_table
from workflow_scripts.outputs.tables import merge_with_cells, summary_table
from workflow_scripts.process.memory import PHASES

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def tables(tmp_path):
    cells = fixture_cells()
    merged = merge_with_cells(list(fixture_metrics(tmp_path).values()), cells)
    return summary_table(merged, cells), spec_gain_table(merged)


def latency_samples() -> dict:
    return {
        cell: plots_cell.latency_samples_ms(
            RequestTable.of(read_records(cell_files(cell) / "requests.jsonl"))
        )
        for cell in (BASE, DRAFTER, BASE_C4, FAILED)
    }


def labelled(fig) -> bool:
    titles = [ax.get_title() for ax in fig.axes] + [fig.get_suptitle()]
    return any(titles) and all(ax.get_xlabel() for ax in fig.axes)


def figures(summary: pd.DataFrame, spec_gain: pd.DataFrame) -> dict:
    return {
        "decode": plots.decode_throughput_figure(summary),
        "spec_gain": plots.spec_gain_figure(spec_gain),
        "latency": plots.latency_boxes_figure(latency_samples()),
        "peak_memory": plots.peak_memory_figure(summary),
        "concurrency": plots.throughput_vs_concurrency_figure(summary),
        "reference": plots.measured_vs_reference_figure(summary),
    }


def test_every_summary_figure_is_labelled_and_written_as_png_and_svg(tmp_path, tables):
    for name, fig in figures(*tables).items():
        assert labelled(fig), name
        plots.save_figure(fig, tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG_MAGIC, name
        assert (tmp_path / f"{name}.png").stat().st_size > 5000, name
        assert b"<svg" in (tmp_path / f"{name}.svg").read_bytes()[:2000], name
    assert not list(tmp_path.glob(".plot-*")), "temp files left behind"


def test_decode_figure_shows_each_cell_and_its_status(tables):
    summary, _ = tables
    fig = plots.decode_throughput_figure(summary)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert " failed" in texts and " blocked" in texts
    assert f" {summary.set_index('cell').loc[BASE, 'decode_tok_s']:.1f}" in texts
    assert "tiny-llama · llamacpp-local" in texts  # the group title
    bars = [patch.get_width() for patch in fig.axes[0].patches]
    assert len(bars) == len(summary)


def test_latency_samples_agree_with_metrics(tmp_path):
    metrics = fixture_metrics(tmp_path)
    for cell in (BASE, DRAFTER):
        samples = latency_samples()[cell]
        assert statistics.median(samples["ttft_ms"]) == pytest.approx(
            metrics[cell]["ttft_ms"]["median"]
        )
        assert statistics.median(samples["tpot_ms"]) == pytest.approx(
            metrics[cell]["tpot_ms"]["median"]
        )
    assert latency_samples()[FAILED] == {"ttft_ms": [], "tpot_ms": []}


def test_memory_figure_peak_matches_metrics_and_phases_are_shaded(tmp_path):
    metrics = fixture_metrics(tmp_path)
    rows = plots_cell.read_memory(cell_files(BASE) / "memory.csv")
    spans = plots_cell.phase_spans(rows)
    assert [phase for phase, _, _ in spans] == list(PHASES)
    assert all(a[2] == b[1] for a, b in zip(spans, spans[1:], strict=False))  # contiguous
    fig = plots_cell.memory_figure(rows, BASE)
    drop = next(line for line in fig.axes[0].lines if "MemAvailable" in line.get_label())
    assert max(drop.get_ydata()) == pytest.approx(metrics[BASE]["mem"]["peak_delta_gib"])
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert [f"phase: {p}" for p in PHASES] == [t for t in legend if t.startswith("phase:")]
    assert fig.axes[0].get_ylabel() == "memory (GiB, 2^30 bytes)"


def test_cell_figures_without_data_say_why():
    fig = plots_cell.latency_figure(RequestTable.of([]), "some-cell", "blocked: no head")
    assert "no completed requests (status: blocked: no head)" in [
        t.get_text() for t in fig.axes[0].texts
    ]
    fig = plots_cell.memory_figure([], "some-cell", "blocked: no head")
    assert "no memory samples" in fig.axes[0].texts[0].get_text()


def test_concurrency_sweep_series(tables):
    summary, _ = tables
    series = plots.concurrency_series(summary)
    assert list(series) == ["tiny-llama · llamacpp-local · q4_0 · none"]
    assert list(series["tiny-llama · llamacpp-local · q4_0 · none"]["concurrency"]) == [2, 4]
    without_sweep = summary[summary["cell"] != BASE_C4]
    assert plots.concurrency_series(without_sweep) == {}
    fig = plots.throughput_vs_concurrency_figure(without_sweep)
    assert "two or more concurrencies" in fig.axes[0].texts[0].get_text()


def test_a_sweeps_points_are_left_to_the_sweep_figures(tables):
    """The concurrency view draws the cells that are no sweep's points: a sweep's points are
    drawn once, by the sweep figures (pareto, sweep_latency)."""
    summary, _ = tables
    assert list(plots.concurrency_series(summary, sweep_points={BASE})) == []
    fig = plots.throughput_vs_concurrency_figure(summary, sweep_points={BASE_C4})
    assert "two or more concurrencies" in fig.axes[0].texts[0].get_text()
    kept = plots.concurrency_series(summary, sweep_points={DRAFTER})
    assert list(kept["tiny-llama · llamacpp-local · q4_0 · none"]["concurrency"]) == [2, 4]


def test_reference_figure_pairs_measured_and_published(tables):
    summary, _ = tables
    fig = plots.measured_vs_reference_figure(summary)
    assert [ax.get_xlabel() for ax in fig.axes] == [
        "decode tok/s (tokens/s)",
        "prefill tok/s (tokens/s)",
    ]
    widths = sorted(round(p.get_width(), 2) for p in fig.axes[0].patches)
    measured = summary.set_index("cell").loc[BASE, "decode_tok_s"]
    assert widths == sorted([round(measured, 2), 120.0])
    no_refs = summary.drop(columns=[c for c in summary.columns if c.startswith("ref_")])
    fig = plots.measured_vs_reference_figure(no_refs)
    assert "no cell has published reference figures" in fig.axes[0].texts[0].get_text()


def test_spec_gain_figure_without_drafters_says_so():
    empty = pd.DataFrame(columns=SPEC_GAIN_COLUMNS)
    fig = plots.spec_gain_figure(empty)
    assert "no drafter cells" in fig.axes[0].texts[0].get_text()
