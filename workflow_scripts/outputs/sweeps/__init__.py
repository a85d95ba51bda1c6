"""Load sweeps as tables and figures: each point of a series (one model × engine × quant ×
drafter × workload at several concurrencies or request rates) with its figures and intervals
(`points`: sweeps.csv), the frontier of throughput against interactivity over every point
(`frontier`: pareto.csv), each drafter point's gain over its base point and its acceptance
(`gain`: spec_gain_sweep.csv), where along the load a drafter stops paying (`crossover`:
spec_crossover.csv), a card per series in words (`cards`), all four tables at once (`build`),
the rule's work, the points' records read and the tables written (`files`) and the figures
(`plots`, matplotlib: imported only by the rule that draws). Pure functions of the metrics (a
cell's repeats already folded in: repeats.collapse_repeats), request records and cells; a
point's name and typed load come from config/sweeps.py; the intervals from outputs/stats.py."""

from __future__ import annotations

from .build import SweepTables, sweep_tables
from .cards import series_sections
from .crossover import EVERY_POINT, NEVER, NO_BASE, NO_VERDICT, crossover_summary, crossover_table
from .frontier import frontier_stretches, pareto_frontier, pareto_table
from .gain import acceptance_interval, reference_note, series_pairs, spec_gain_sweep_table
from .points import sweep_points, sweep_table

__all__ = [
    "EVERY_POINT",
    "NEVER",
    "NO_BASE",
    "NO_VERDICT",
    "SweepTables",
    "acceptance_interval",
    "crossover_summary",
    "crossover_table",
    "frontier_stretches",
    "pareto_frontier",
    "pareto_table",
    "reference_note",
    "series_pairs",
    "series_sections",
    "spec_gain_sweep_table",
    "sweep_points",
    "sweep_table",
    "sweep_tables",
]
