"""The bodies of the summary rules (`aggregate`, the summary figure rules): read the rule's
inputs, call the tables, spec gain and plots, write the rule's outputs."""

from __future__ import annotations

import json
from collections.abc import Mapping

from ..config.matrix import repeat_of
from ..vocabulary import Cell
from .record_index import read_index
from .repeats import collapse_repeats
from .report_html import write_tables_html
from .slo_cells import read_goals, with_slo
from .spec_gain import spec_gain_table
from .tables import index_table, merge_with_cells, summary_table
from .writers import INDEX_INTRO, load_indexed, write_tables


def cells_from_params(text: str) -> list[Cell]:
    """The config's cells, as the rule's `cells` param carries them (a JSON list of dicts)."""
    return [Cell.from_dict(cell) for cell in json.loads(text)]


def goals_of_input(sm) -> dict:
    """The latency goals the rule reads (`goals`: none in a matrix without one)."""
    goals = sm.input.get("goals") or []
    return read_goals([goals] if isinstance(goals, str) else goals)


def aggregate_from_snakemake(sm) -> None:
    cells = cells_from_params(sm.params.cells)
    all_metrics, records = load_indexed(read_index(sm.input.records))
    all_metrics = with_slo(all_metrics, cells, records, goals_of_input(sm))
    summary, compact, spec_gain = write_tables(all_metrics, cells, sm.output, records=records)
    _, cells, _ = collapse_repeats(all_metrics, cells)  # the index: one line per cell
    write_tables_html(
        sm.output.summary_html,
        "Summary",
        [
            ("Index: one line per cell", index_table(summary, cells), INDEX_INTRO),
            ("The columns a reader compares", compact, compact.attrs["intro"]),
        ],
    )
    write_tables_html(
        sm.output.spec_gain_html,
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
        "concurrency_plot": lambda d: plots.throughput_vs_concurrency_figure(d["summary"]),
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


def figures_from_snakemake(sm) -> None:
    """Draw every summary figure the rule names among its outputs (PNG + SVG)."""
    from .plots import save_figure
    from .plots_cell import latency_samples_ms

    # figures of metrics alone (against concurrency, against published figures) read no
    # request records: intervals no figure of theirs draws would cost a large matrix minutes
    files = read_index(sm.input.records)
    metrics, records_by_run = load_indexed(
        files, requests=bool(FIGURES_OF_REQUESTS & set(sm.output.keys()))
    )
    all_metrics, cells, records = collapse_repeats(
        metrics, cells_from_params(sm.params.cells), records_by_run
    )
    all_metrics = merge_with_cells(all_metrics, cells)
    data = {
        "summary": summary_table(all_metrics, cells, records),
        "spec_gain": spec_gain_table(all_metrics, records),
        "latency_samples": lambda: pooled_repeats(
            {run: latency_samples_ms(runs) for run, runs in records_by_run.items()}
        ),
    }
    for key, build in _figure_builders().items():
        path = sm.output.get(key)  # the rule's named outputs say which figures it draws
        if path is not None:
            save_figure(build(data), path)
