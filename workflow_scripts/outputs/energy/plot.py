"""The energy frontier's figure (summary/energy_frontier.png, beside pareto.png): output tokens
per joule against interactivity for every sweep point whose energy was measured, one line per
series in load order, each point labelled by its load, the frontier drawn over them; where none
was measured, the reason. Matplotlib: only the sweeps rule, which draws, imports it."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..plots import LOG_SCALE_SPREAD, message_figure  # noqa: E402
from .frontier import frontier_intro, measured_points  # noqa: E402

TITLE = "Output tokens per joule against interactivity"
FRONTIER_COLOR = "#222222"
LEGEND_SERIES = 20


def _log_if_wide(values: pd.Series) -> bool:
    positive = [float(v) for v in values if float(v) > 0]
    return bool(positive) and max(positive) / min(positive) > LOG_SCALE_SPREAD


def energy_frontier_figure(sweeps: pd.DataFrame, frontier: pd.DataFrame):
    """Tokens per joule (y) against interactivity (x), one line per series, the frontier
    dashed; a figure that says why where no point was measured."""
    points = measured_points(sweeps)
    if points.empty:
        return message_figure(TITLE, frontier_intro(sweeps).split("\n\n")[0])
    fig, ax = plt.subplots(figsize=(9, 5.5))
    series = list(dict.fromkeys(points["series"]))
    for name in series:
        group = points[points["series"] == name]
        ax.plot(
            group["interactivity_tok_s"].astype(float),
            group["output_tokens_per_j"].astype(float),
            marker="o",
            markersize=4,
            linewidth=1.2,
            label=" · ".join(name.split("__")),
        )
    for row in points.itertuples():
        ax.annotate(
            row.point,
            (float(row.interactivity_tok_s), float(row.output_tokens_per_j)),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=7,
        )
    if len(frontier):
        ax.plot(
            frontier["interactivity_tok_s"].astype(float),
            frontier["output_tokens_per_j"].astype(float),
            color=FRONTIER_COLOR,
            linestyle="--",
            linewidth=1.5,
            marker="o",
            markersize=9,
            markerfacecolor="none",
            label="frontier (no point has more of both)",
        )
    for axis, column in (("x", "interactivity_tok_s"), ("y", "output_tokens_per_j")):
        if _log_if_wide(points[column]):
            (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    ax.set_xlabel("interactivity (tokens/s one user sees = 1000 / TPOT median)")
    ax.set_ylabel("output tokens per joule (gross: idle draw included)")
    ax.set_title(f"{TITLE}, one line per series\npoints labelled by load")
    if len(series) <= LEGEND_SERIES:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
