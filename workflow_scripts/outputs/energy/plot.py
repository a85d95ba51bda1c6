"""The energy frontier's figure (summary/energy_frontier.png, beside pareto.png): output tokens
per joule against interactivity for every sweep point whose energy was measured, drawn as the
throughput frontier is (sweeps/plots.frontier_figure); where none was measured, the reason.
Matplotlib: only the sweeps rule, which draws, imports it."""

from __future__ import annotations

import pandas as pd

from ..plots import message_figure
from ..sweeps.plots import frontier_figure
from .frontier import frontier_intro, measured_points

TITLE = "Output tokens per joule against interactivity"
Y_AXIS = ("output_tokens_per_j", "output tokens per joule (gross: idle draw included)")


def energy_frontier_figure(sweeps: pd.DataFrame, frontier: pd.DataFrame):
    """Tokens per joule (y) against interactivity (x), one line per series, the frontier
    dashed; a figure that says why where no point was measured."""
    points = measured_points(sweeps)
    if points.empty:
        return message_figure(TITLE, frontier_intro(sweeps).split("\n\n")[0])
    return frontier_figure(points, frontier, Y_AXIS, TITLE)
