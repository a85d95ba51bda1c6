"""The work of the summary rules (`aggregate`, and `summary_plots`, `concurrency_figure`,
`reference_figure`): from the records index and the cells, the tables, spec gain and plots,
written to the paths the rule names (its entry script, `entry/<rule>.py`, hands them over)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config.cell_ids import repeat_of
from ..loadgen.request_table import request_tables
from ..vocabulary import Cell
from .energy.table import ENERGY_TITLE, energy_view, write_energy
from .fidelity.compared import drafter_output_verdicts
from .record_index import read_index
from .repeats import collapse_repeats, first_runs
from .report_html import write_tables_html
from .search.cells import with_slo
from .search.goals import read_goals
from .spec_gain import spec_gain_table
from .tables import index_table, merge_with_cells, summary_table
from .writers import INDEX_INTRO, load_indexed, write_tables


def cells_from_params(text: str) -> list[Cell]:
    """The config's cells, as the rule's `cells` param carries them (a JSON list of dicts)."""
    return [Cell.from_dict(cell) for cell in json.loads(text)]


def write_summary(
    records_index: str | Path,
    cells: Sequence[Cell],
    goal_files: Sequence[str | Path],
    out: Mapping[str, str | Path],
    prices: Mapping[str, Any] | None = None,
) -> None:
    """The `aggregate` rule's outputs (paths in `out`: summary, index, spec gain and energy as
    CSV, Markdown and HTML) from the indexed records; `goal_files` the latency goals to judge
    the cells by (none in a matrix without one); `prices` each cell's price (config `cost`)."""
    all_metrics, records = load_indexed(read_index(records_index))
    requests = request_tables(records)  # each run's figures, once for its goal and intervals
    all_metrics = with_slo(all_metrics, cells, requests, read_goals(goal_files))
    # before the floor runs are folded away
    outputs = drafter_output_verdicts(cells, records, all_metrics)
    summary, compact, spec_gain = write_tables(
        all_metrics, cells, out, records=records, outputs=outputs, requests=requests, prices=prices
    )
    folded, cells, _ = collapse_repeats(all_metrics, cells)  # the index: one line per cell
    energy = write_energy(merge_with_cells(folded, cells), prices, out)
    write_tables_html(
        out["summary_html"],
        "Summary",
        [
            ("Index: one line per cell", index_table(summary, cells), INDEX_INTRO),
            ("The columns a reader compares", compact, compact.attrs["intro"]),
            (ENERGY_TITLE, energy_view(energy), energy.attrs["intro"]),
        ],
    )
    write_tables_html(
        out["spec_gain_html"],
        "Speculative decoding",
        [
            (
                "Each drafter cell beside its base",
                spec_gain,
                "",
            )
        ],
    )


# The summary figures drawn from the request records too (intervals, latency samples).
FIGURES_OF_REQUESTS = frozenset({"decode_plot", "latency_plot", "memory_plot", "spec_gain_plot"})


def _figure_builders():
    from . import plots  # matplotlib: only the figure rules pay its import

    return {
        "decode_plot": lambda d: plots.decode_throughput_figure(d["summary"]),
        "latency_plot": lambda d: plots.latency_boxes_figure(d["latency_samples"]()),
        "memory_plot": lambda d: plots.peak_memory_figure(d["summary"]),
        "spec_gain_plot": lambda d: plots.spec_gain_figure(d["spec_gain"]),
        "concurrency_plot": lambda d: plots.throughput_vs_concurrency_figure(
            d["summary"], d["sweep_points"]
        ),
        "reference_plot": lambda d: plots.measured_vs_reference_figure(d["summary"]),
    }


def pooled_repeats(samples: Mapping[str, Mapping[str, list[float]]]) -> dict[str, dict]:
    """Per-cell latency samples with a cell's repeats pooled under the cell's id: one box per
    cell, as one row per cell in the tables."""
    out: dict[str, dict[str, list[float]]] = {}
    for cell, values in samples.items():
        pooled = out.setdefault(repeat_of(cell)[0], {key: [] for key in values})
        for key, items in values.items():
            pooled.setdefault(key, []).extend(items)
    return {cell: {k: sorted(v) for k, v in values.items()} for cell, values in out.items()}


def draw_summary_figures(
    records_index: str | Path, cells: Sequence[Cell], out: Mapping[str, str | Path]
) -> None:
    """Draw each summary figure `out` names (its keys: `decode_plot`, `concurrency_plot`, ...;
    PNG at the path, SVG beside it): a figure rule's named outputs say which it draws."""
    from .plots import save_figure
    from .plots_cell import latency_samples_ms

    # figures of metrics alone (against concurrency, against published figures) read no
    # request records: intervals no figure of theirs draws would cost a large matrix minutes
    files = read_index(records_index)
    metrics, records_by_run = load_indexed(files, requests=bool(FIGURES_OF_REQUESTS & set(out)))
    requests_by_run = request_tables(records_by_run)
    requests = first_runs(metrics, requests_by_run)
    all_metrics, cells, records = collapse_repeats(metrics, cells, records_by_run)
    all_metrics = merge_with_cells(all_metrics, cells)
    data = {
        "summary": summary_table(all_metrics, cells, requests),
        "spec_gain": spec_gain_table(all_metrics, records),
        "sweep_points": {cell.id for cell in cells if cell.sweep is not None},
        "latency_samples": lambda: pooled_repeats(
            {run: latency_samples_ms(table) for run, table in requests_by_run.items()}
        ),
    }
    for key, build in _figure_builders().items():
        path = out.get(key)
        if path is not None:
            save_figure(build(data), path)
