"""The `fidelity` rule's work: the cells' records read, the fidelity table (`table`), the
frontier (`frontier`), their HTML page and the figure (`plot`) written."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...atomic import write_text
from ...fidelity.pairs import FidelitySettings
from ...vocabulary import Cell
from ..report_html import write_tables_html
from ..writers import to_markdown
from .frontier import FRONTIER_INTRO, FRONTIER_TITLE, frontier_points, frontier_table
from .table import FIDELITY_INTRO, fidelity_table, fidelity_view, read_kld


def write_fidelity(
    files: Sequence[Any],
    cells: Sequence[Cell],
    kld_paths: Sequence[str | Path],
    settings: FidelitySettings,
    out: Mapping[str, str | Path],
) -> None:
    """The `fidelity` rule's tables and figure, from the records index's `files`."""
    from ..plots import save_figure
    from ..writers import load_indexed
    from .plot import fidelity_figure  # matplotlib: only this rule pays its import

    all_metrics, records = load_indexed(files)
    table = fidelity_table(cells, all_metrics, records, read_kld(kld_paths), settings)
    write_text(out["fidelity_csv"], table.to_csv(index=False))
    write_text(
        out["fidelity_md"], to_markdown(fidelity_view(table), "Output fidelity", FIDELITY_INTRO)
    )
    metrics = {m["cell"]: m for m in all_metrics}
    points = frontier_points(table, metrics, {c.id: c for c in cells})
    frontier = frontier_table(points)
    write_text(out["fidelity_frontier_csv"], frontier.to_csv(index=False))
    shown = frontier.assign(loss=[f"{v:.4g}" for v in frontier["loss"]])
    write_text(out["fidelity_frontier_md"], to_markdown(shown, FRONTIER_TITLE, FRONTIER_INTRO))
    write_tables_html(
        out["fidelity_html"],
        "Output fidelity",
        [
            ("Each compared cell against its reference", fidelity_view(table), FIDELITY_INTRO),
            (FRONTIER_TITLE, frontier, FRONTIER_INTRO),
        ],
    )
    save_figure(fidelity_figure(points), out["fidelity_plot"])
