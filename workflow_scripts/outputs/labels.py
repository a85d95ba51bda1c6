"""What the DAG needs to know of the cells' outputs while the Snakefile is parsed: which optional
summary figures and sweep outputs a matrix gets, a cell's labels in the report, its engine label
and context size.
Stdlib only: rules/common.smk imports it, and parsing must not pay for pandas or matplotlib."""

from __future__ import annotations

from collections.abc import Sequence

from ..vocabulary import Cell, CellData

# Engine settings that set the server's context, by the names the adapters use.
CONTEXT_SETTING_KEYS = ("ctx_size", "max_model_len", "context_length")


def server_context(cell: Cell) -> int | None:
    """The server's context length as the engine settings set it."""
    settings = cell.engine_spec.get("settings") or {}
    for key in CONTEXT_SETTING_KEYS:
        if settings.get(key):
            return int(settings[key])
    return None


def context_tokens(cell: Cell) -> int | None:
    """The server's context length from the engine settings, else the model's window."""
    server = server_context(cell)
    if server is not None:
        return server
    return cell.model_info.get("context_window") or None


def engine_label(cell: Cell) -> str:
    """`engine + drafter (kind, n_max N)`: the seeds' "Engine (+speculative)"."""
    drafter = cell.drafter_spec
    if not drafter or not cell.has_drafter:
        return cell.engine
    detail = drafter.get("kind", "")
    if drafter.get("model"):
        detail += f", draft model {drafter['model']}"
    if drafter.get("n_max"):
        detail += f", n_max {drafter['n_max']}"
    return f"{cell.engine} + {cell.drafter} ({detail})"


def matrix_sweeps_concurrency(cells: Sequence[Cell]) -> bool:
    """True when one model/engine/quant/drafter runs at two or more concurrencies outside a
    sweep. A sweep's points are drawn by the sweep figures (pareto, sweep_latency), one line per
    series; the older concurrency view is for the cells that are no sweep's points."""
    seen: dict[tuple, set] = {}
    for cell in cells:
        if cell.sweep is not None:
            continue
        key = (cell.model, cell.engine, cell.quant, cell.drafter)
        seen.setdefault(key, set()).add(cell.concurrency)
    return any(len(values) >= 2 for values in seen.values())


def optional_summary_figures(cells: Sequence[CellData]) -> list[str]:
    """Summary figures a matrix gets only when they can say something: throughput vs
    concurrency for cells at two or more concurrencies that are no sweep's points (a sweep has
    its own figures: sweep_outputs), measured vs published when references exist."""
    cells = [Cell.of(cell) for cell in cells]
    names = []
    if matrix_sweeps_concurrency(cells):
        names.append("throughput_vs_concurrency")
    if any(cell.reference for cell in cells):
        names.append("measured_vs_reference")
    return names


SWEEP_TABLES = ["sweeps", "pareto", "spec_gain_sweep", "spec_crossover"]
SWEEP_FIGURES = ["pareto", "sweep_latency", "spec_gain_sweep"]


# The front page's answers beside the index (the overview rule): where a drafter stops paying
# (a matrix with sweeps) and the largest load within a latency goal (one with searches), each
# a table under summary/ and the figures shown below it.
FRONT_PAGE_ANSWERS = {"spec_crossover": ("pareto", "spec_gain_sweep"), "slo": ("slo_search",)}


def front_page_files(summary_files: Sequence[str]) -> list[str]:
    """The files among `summary_files` (a matrix's sweep and search outputs) the front page
    shows: each answer's table (CSV) and figures (PNG)."""
    names = {f"{table}.csv" for table in FRONT_PAGE_ANSWERS}
    names |= {f"{figure}.png" for figures in FRONT_PAGE_ANSWERS.values() for figure in figures}
    return [path for path in summary_files if path.rsplit("/", 1)[-1] in names]


def sweep_cell_ids(cells: Sequence[CellData]) -> list[str]:
    """The cells that are points of a sweep (their repeats too): what the sweeps rule reads."""
    return [cell.id for cell in map(Cell.of, cells) if cell.sweep is not None]


def sweep_outputs(cells: Sequence[CellData]) -> list[str]:
    """The sweeps rule's files under summary/ (tables as CSV and markdown, their HTML page, the
    figures; an SVG beside each PNG), for a matrix with at least one sweep; none without."""
    if not sweep_cell_ids(cells):
        return []
    tables = [f"{name}.{ext}" for name in SWEEP_TABLES for ext in ("csv", "md")]
    figures = [f"{name}.{ext}" for name in SWEEP_FIGURES for ext in ("png", "svg")]
    return [*tables, "sweeps.html", *figures]


def report_labels(cell: CellData, figure: str) -> dict[str, str]:
    """Labels of a cell's outputs in the Snakemake report (its model is the subcategory)."""
    cell = Cell.of(cell)
    return {
        "cell": cell.id,
        "engine": cell.engine,
        "quant": cell.quant,
        "drafter": cell.drafter,
        "workload": cell.workload,
        "figure": figure,
    }
