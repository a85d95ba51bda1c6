"""Every sweep table at once, from the collapsed metrics, the cells and the records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ...fidelity.series import SeriesVerdict
from ...loadgen.records import RequestRecord
from ...loadgen.request_table import RequestTable
from ...vocabulary import Cell, CellMetrics
from ..energy.frontier import energy_frontier_table
from .crossover import crossover_table
from .frontier import pareto_table
from .gain import spec_gain_sweep_table
from .points import sweep_table


@dataclass(frozen=True)
class SweepTables:
    sweeps: pd.DataFrame
    pareto: pd.DataFrame
    spec_gain_sweep: pd.DataFrame
    spec_crossover: pd.DataFrame
    energy_frontier: pd.DataFrame  # output tokens per joule against interactivity


def sweep_tables(
    all_metrics: Sequence[CellMetrics],
    cells: Sequence[Cell],
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
    gpus: Mapping[str, int | None] | None = None,
    outputs: Mapping[str, str] | None = None,
    series_outputs: Mapping[str, SeriesVerdict] | None = None,
    prices: Mapping[str, Any] | None = None,
) -> SweepTables:
    """Every sweep table from the collapsed metrics, the config's repeat-1 cells and the first
    finished repeat's records (repeats.collapse_repeats); `outputs`: each drafter point's
    outputs verdict, `series_outputs` each drafter series' outputs judged as a family
    (outputs.fidelity.compared.drafter_outputs); `prices` each point's price (config `cost`)."""
    requests = {cell: RequestTable.of(runs) for cell, runs in (records or {}).items()}
    sweeps = sweep_table(all_metrics, cells, requests, gpus, prices)
    gains = spec_gain_sweep_table(all_metrics, cells, records, outputs, series_outputs)
    return SweepTables(
        sweeps,
        pareto_table(sweeps),
        gains,
        crossover_table(cells, gains),
        energy_frontier_table(sweeps),
    )
