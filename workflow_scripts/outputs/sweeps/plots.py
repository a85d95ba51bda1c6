"""Sweep figures as pure functions of the sweep tables (points, frontier, gain): throughput
against interactivity with the frontier, latency against load, the drafter's gain against load.
Saved as PNG + SVG by outputs/plots.save_figure."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ...vocabulary import Status  # noqa: E402
from ..plots import LOG_SCALE_SPREAD, message_figure  # noqa: E402

FRONTIER_COLOR = "#222222"
LABELLED_POINTS = 80  # above this many points, only the frontier's are labelled
LEGEND_SERIES = 20  # above this many series the legend would hide the figure
AXIS_LABELS = {
    "concurrency": "concurrency (requests in flight)",
    "request_rate": "request rate (Poisson arrivals/s)",
}


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def series_label(series: str) -> str:
    return " · ".join(series.split("__"))


def _finite(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    keep = frame["status"] == Status.DONE if "status" in frame else pd.Series(True, frame.index)
    for column in columns:
        keep &= frame[column].map(lambda v: not _missing(v) and float(v) > 0)
    return frame[keep]


def _spread_scale(ax, values: Sequence[float], axis: str, base: float = 10) -> bool:
    """A logarithmic axis when the values span more than LOG_SCALE_SPREAD."""
    positive = [float(v) for v in values if not _missing(v) and float(v) > 0]
    wide = bool(positive) and max(positive) / min(positive) > LOG_SCALE_SPREAD
    if wide:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=base)
    return wide


def _load_axis(ax, values: Sequence[float], axis: str) -> None:
    """Concurrency on a log2 axis with its own values as ticks when it spans 4x or more."""
    values = sorted({float(v) for v in values if not _missing(v)})
    if values and values[0] > 0 and values[-1] / values[0] >= 4:
        ax.set_xscale("log", base=2)
        ax.set_xticks(values, [f"{v:g}" for v in values])
        ax.minorticks_off()
    ax.set_xlabel(
        AXIS_LABELS.get(axis, axis) + (", log2 scale" if ax.get_xscale() == "log" else "")
    )


def _legend(fig, ax, count: int) -> None:
    if count <= LEGEND_SERIES:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        fig.text(0.99, 0.01, f"{count} series (legend left out)", ha="right", fontsize=7)


def pareto_figure(sweeps: pd.DataFrame, pareto: pd.DataFrame):
    """Decode tok/s (y) against interactivity (x) for every finished point, one line per series
    in load order, each point labelled by its load; the frontier drawn over them."""
    points = _finite(sweeps, "decode_tok_s", "interactivity_tok_s")
    if points.empty:
        return message_figure(
            "Throughput vs interactivity", "no point of any sweep finished with both figures"
        )
    return frontier_figure(
        points,
        pareto,
        ("decode_tok_s", "decode throughput (tokens/s, all requests)"),
        "Throughput vs interactivity",
    )


def frontier_figure(points: pd.DataFrame, frontier: pd.DataFrame, y: tuple[str, str], title: str):
    """`y` = (column, axis label) against interactivity (x) for `points` (each with both
    figures), one line per series in load order, each point labelled by its load (only the
    frontier's past LABELLED_POINTS); `frontier` drawn over them, dashed."""
    column, label = y
    fig, ax = plt.subplots(figsize=(9, 5.5))
    series = list(dict.fromkeys(points["series"]))
    for name in series:
        group = points[points["series"] == name]
        ax.plot(
            group["interactivity_tok_s"].astype(float),
            group[column].astype(float),
            marker="o",
            markersize=4,
            linewidth=1.2,
            label=series_label(name),
        )
    few = len(points) <= LABELLED_POINTS
    labelled = points if few else points[points["cell"].isin(set(frontier["cell"]))]
    for row in labelled.itertuples():
        ax.annotate(
            row.point,
            (float(row.interactivity_tok_s), float(getattr(row, column))),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=7,
        )
    if len(frontier):
        ax.plot(
            frontier["interactivity_tok_s"].astype(float),
            frontier[column].astype(float),
            color=FRONTIER_COLOR,
            linestyle="--",
            linewidth=1.5,
            marker="o",
            markersize=9,
            markerfacecolor="none",
            label="frontier (no point has more of both)",
        )
    wide_x = _spread_scale(ax, points["interactivity_tok_s"], "x")
    wide_y = _spread_scale(ax, points[column], "y")
    ax.set_xlabel(
        "interactivity (tokens/s one user sees = 1000 / TPOT median)"
        + (", log scale" if wide_x else "")
    )
    ax.set_ylabel(label + (", log scale" if wide_y else ""))
    labels = "points labelled by load" if few else "frontier points labelled by load"
    ax.set_title(f"{title}, one line per series\n{labels}")
    ax.grid(alpha=0.3)
    _legend(fig, ax, len(series) + 1)
    fig.tight_layout()
    return fig


LATENCY_PANELS = [
    ("ttft", "time to first token (ms)"),
    ("tpot", "time per output token (ms)"),
]


def sweep_latency_figure(sweeps: pd.DataFrame):
    """TTFT and TPOT against load, per series: the median solid, p99 dashed; a row of panels
    per load axis the sweeps use."""
    points = _finite(sweeps, "ttft_median_ms")
    if points.empty:
        return message_figure("Latency vs load", "no point of any sweep finished")
    axes_used = list(dict.fromkeys(points["axis"]))
    fig, grid = plt.subplots(len(axes_used), 2, figsize=(12, 4.2 * len(axes_used)), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    series = list(dict.fromkeys(points["series"]))
    for row, axis in enumerate(axes_used):
        on_axis = points[points["axis"] == axis]
        for col, (figure, label) in enumerate(LATENCY_PANELS):
            ax = grid[row][col]
            values = []
            for i, name in enumerate(series):
                group = on_axis[on_axis["series"] == name]
                if group.empty:
                    continue
                color = colors[i % len(colors)]
                for stat, style in (("median", "-"), ("p99", "--")):
                    y = group[f"{figure}_{stat}_ms"].astype(float)
                    values += list(y)
                    ax.plot(
                        group[axis].astype(float),
                        y,
                        linestyle=style,
                        marker="o" if stat == "median" else "x",
                        markersize=4,
                        color=color,
                        label=f"{series_label(name)} {stat}" if row == col == 0 else None,
                    )
            _load_axis(ax, on_axis[axis], axis)
            wide = _spread_scale(ax, values, "y")
            ax.set_ylabel(label + (", log scale" if wide else ""))
            ax.grid(alpha=0.3)
    fig.suptitle("TTFT and TPOT against load, per series (solid: median, dashed: p99)")
    handles, labels = grid[0][0].get_legend_handles_labels()
    if len(labels) <= LEGEND_SERIES:
        grid[0][1].legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    else:
        fig.text(0.99, 0.01, f"{len(series)} series (legend left out)", ha="right", fontsize=7)
    fig.tight_layout()
    return fig


def spec_gain_sweep_figure(gains: pd.DataFrame):
    """The drafter's decode gain against load with its 95 % interval as a band, one line per
    drafter series, a line at 0 (above: the drafter pays)."""
    if gains.empty or gains["decode_gain_pct"].map(_missing).all():
        return message_figure(
            "Speculative decoding gain vs load",
            "no drafter series has a base series with the same points and a finished pair",
        )
    axes_used = list(dict.fromkeys(gains["axis"]))
    fig, grid = plt.subplots(1, len(axes_used), figsize=(8 * len(axes_used), 4.8), squeeze=False)
    series = list(dict.fromkeys(gains["series"]))
    for col, axis in enumerate(axes_used):
        ax = grid[0][col]
        on_axis = gains[gains["axis"] == axis]
        for name in series:
            group = on_axis[on_axis["series"] == name]
            if group.empty:
                continue
            x = group[axis].astype(float)
            gain = group["decode_gain_pct"].astype(float)
            (line,) = ax.plot(x, gain, marker="o", markersize=4, label=series_label(name))
            lo = group["decode_gain_lo_pct"].astype(float)
            hi = group["decode_gain_hi_pct"].astype(float)
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.18, linewidth=0)
        ax.axhline(0, color=FRONTIER_COLOR, linewidth=1)
        _load_axis(ax, on_axis[axis], axis)
        ax.set_ylabel("decode tok/s gain over the base point (%)")
        ax.grid(alpha=0.3)
    fig.suptitle(
        "Speculative decoding: decode gain against load (band: 95 % interval; "
        "above 0: the drafter pays)"
    )
    _legend(fig, grid[0][-1], len(series))
    fig.tight_layout()
    return fig
