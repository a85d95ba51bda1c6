"""The card rule's work: read a cell's files, draw its plots, write card.md and card.html."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...atomic import write_text
from ...loadgen.records import read_records
from ...loadgen.request_table import RequestTable
from ...vocabulary import Cell
from ..fidelity.card import card_fidelity
from ..report_html import data_uri
from ..search.cells import slo_entry
from ..search.goals import read_goals
from .build import build_card, status_line
from .model import Card
from .render import render_html, render_markdown


@dataclass(frozen=True)
class FidelityInputs:
    """The card rule's fidelity param (`kind`, `reference_cell`, `goal`, a sweep point's own id
    as `point`; empty: compared with nothing) and the files it names: the reference's and its
    floor run's metrics.json, the quant's KL file, a sweep point's series' family file (None
    where there is none)."""

    settings: Mapping[str, Any]
    reference: str | None = None
    floor: str | None = None
    kld: str | None = None
    family: str | None = None


# Caption and output key of each per-cell figure the card shows.
CELL_PLOTS = [
    ("TTFT and TPOT distributions (CDF)", "latency_plot"),
    ("Memory over time, phases shaded", "memory_plot"),
]


def write_card(
    cell: Cell,
    metrics_path: str | Path,
    requests_path: str | Path,
    memory_path: str | Path,
    out: Mapping[str, str | Path],
    goal: str | Path | None = None,
    fidelity: FidelityInputs | None = None,
) -> Card:
    """Read a cell's files, draw its plots and write card.md and card.html (paths in `out`:
    card_md, card_html, latency_plot, memory_plot); `goal` the file of its workload's latency
    goal, if it has one (the card judges the run against it); `fidelity` what its outputs are
    compared with."""
    from ..plots import save_figure
    from ..plots_cell import latency_figure, memory_figure, read_memory

    metrics = json.loads(Path(metrics_path).read_text())
    status = status_line(metrics)
    records = read_records(requests_path) if Path(requests_path).exists() else []
    requests = RequestTable.of(records)  # each request's figures, once for every section
    save_figure(latency_figure(requests, cell.id, status), out["latency_plot"], svg=False)
    save_figure(
        memory_figure(read_memory(memory_path), cell.id, status), out["memory_plot"], svg=False
    )
    card_dir = Path(out["card_md"]).parent
    plots = [
        (caption, Path(out[key]).relative_to(card_dir).as_posix()) for caption, key in CELL_PLOTS
    ]
    if goal:
        slo = next(iter(read_goals([goal]).values()))
        metrics = {**metrics, "slo": slo_entry(slo, metrics, requests)}
    compared = (
        card_fidelity(
            records,
            fidelity.settings,
            fidelity.reference,
            fidelity.floor,
            fidelity.kld,
            metrics=metrics,
            family=fidelity.family,
        )
        if fidelity
        else None
    )
    card = build_card(
        cell,
        metrics,
        plots,
        results_dir=card_dir.parent.parent.as_posix(),
        requests=requests,
        fidelity=compared,
    )
    write_text(out["card_md"], render_markdown(card))
    write_text(out["card_html"], render_html(card, lambda rel: data_uri(card_dir / rel)))
    return card
