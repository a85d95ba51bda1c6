"""What the DAG needs to know of the rules' outputs while the Snakefile is parsed: every file each
rule writes (RULE_FILES, the one place an output path is spelled), which optional summary figures
and sweep outputs a matrix gets, a cell's labels in the report, its engine label and context size.
Stdlib only: the DAG (workflow/dag.py, rule_jobs.py) imports it while the Snakefile is parsed, and
parsing must not pay for pandas or matplotlib."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..vocabulary import Cell

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
    sweep, on one kind of content (a conversation's load is no point on a chat load's line). A
    sweep's points are drawn by the sweep figures (pareto, sweep_latency), one line per series;
    the older concurrency view is for the cells that are no sweep's points."""
    seen: dict[tuple, set] = {}
    for cell in cells:
        if cell.sweep is not None:
            continue
        content = cell.workload_spec.dataset.content_label
        key = (cell.model, cell.engine, cell.quant, cell.drafter, content)
        seen.setdefault(key, set()).add(cell.concurrency)
    return any(len(values) >= 2 for values in seen.values())


@dataclass(frozen=True)
class RuleFile:
    """A file a rule writes: its key in the rule (`snakemake.output.<key>`) and its path under
    results_dir (`{cell}` and the like: the rule's wildcards). With a caption (report/<caption>.rst)
    and a category it is shown in the Snakemake report; `figure` labels a cell's own file there."""

    key: str
    path: str
    caption: str | None = None
    category: str | None = None
    figure: str | None = None


def tables(*names: str) -> tuple[RuleFile, ...]:
    """Each summary table as CSV and markdown (keys `<name>_csv`, `<name>_md`)."""
    return tuple(
        RuleFile(f"{n}_{ext}", f"summary/{n}.{ext}") for n in names for ext in ("csv", "md")
    )


def page(name: str, caption: str, category: str) -> RuleFile:
    """A summary table's HTML page, shown in the report (key `<name>_html`)."""
    return RuleFile(f"{name}_html", f"summary/{name}.html", caption, category)


def figure(key: str, name: str, category: str) -> tuple[RuleFile, RuleFile]:
    """A summary figure: its PNG shown in the report (caption `<name>`), its SVG beside it (key
    `<key without _plot>_svg`)."""
    svg = f"{key.removesuffix('_plot')}_svg"
    return RuleFile(key, f"summary/{name}.png", name, category), RuleFile(
        svg, f"summary/{name}.svg"
    )


def cell_files(*names: str) -> tuple[RuleFile, ...]:
    """A cell's own files, `<key>.<ext>` (key `<key>`), under cells/<cell>/."""
    return tuple(RuleFile(name.split(".")[0], f"cells/{{cell}}/{name}") for name in names)


SWEEP_TABLES = ["sweeps", "pareto", "spec_gain_sweep", "spec_crossover", "energy_frontier"]

# Every file each rule writes under results_dir, in the order the rule lists them (the series'
# server record is a service output: workflow_scripts.cell.series.record_path).
RULE_FILES: dict[str, tuple[RuleFile, ...]] = {
    "weights": (RuleFile("manifest", "weights/{weights}.json"),),
    "engine": (RuleFile("stamp", "engines/{engine}.json"),),
    "cell": (
        *cell_files("metrics.json", "requests.jsonl", "memory.csv"),
        RuleFile("server_log", "cells/{cell}/server.log"),
    ),
    "cell_slo": cell_files("slo.json"),
    "card": (
        RuleFile("card_md", "cells/{cell}/card.md"),
        RuleFile("card_html", "cells/{cell}/card.html", "card", "Cells", "result card"),
        RuleFile(
            "latency_plot", "cells/{cell}/latency.png", "cell_latency", "Cells", "TTFT and TPOT"
        ),
        RuleFile(
            "memory_plot", "cells/{cell}/memory.png", "cell_memory", "Memory", "memory over time"
        ),
    ),
    "records": (RuleFile("records", "cells/records.json"),),
    "aggregate": (
        *tables("summary", "index", "spec_gain", "by_turn", "gain_by_content", "energy"),
        page("summary", "summary", "Summary"),
        page("spec_gain", "spec_gain_table", "Speculative decoding"),
    ),
    "comparisons": (
        *tables("comparisons"),
        page("comparisons", "comparisons_table", "Comparisons"),
    ),
    "sweeps": (
        *tables(*SWEEP_TABLES),
        page("sweeps", "sweeps_table", "Sweeps"),
        *figure("pareto_plot", "pareto", "Sweeps"),
        *figure("latency_plot", "sweep_latency", "Sweeps"),
        *figure("spec_gain_plot", "spec_gain_sweep", "Sweeps"),
        *figure("energy_frontier_plot", "energy_frontier", "Sweeps"),
    ),
    "summary_plots": (
        *figure("decode_plot", "decode_tok_s", "Summary"),
        *figure("latency_plot", "latency", "Summary"),
        *figure("memory_plot", "peak_memory", "Memory"),
        *figure("spec_gain_plot", "spec_gain", "Speculative decoding"),
    ),
    "fidelity": (
        *tables("fidelity", "fidelity_frontier"),
        page("fidelity", "fidelity_table", "Fidelity"),
        *figure("fidelity_plot", "fidelity", "Fidelity"),
    ),
    "concurrency_figure": figure("concurrency_plot", "throughput_vs_concurrency", "Summary"),
    "reference_figure": figure("reference_plot", "measured_vs_reference", "Summary"),
    "slo_tables": (
        *tables("slo", "slo_drafter"),
        page("slo", "slo_table", "Latency goals"),
        *figure("figure", "slo_search", "Latency goals"),
    ),
    "fidelity_text": (RuleFile("text", "fidelity/text.txt"),),
    "fidelity_base": (
        RuleFile("record", "fidelity/base/{model}.json"),
        RuleFile("logits", "fidelity/base/{model}.logits"),
    ),
    "fidelity_kld": (RuleFile("record", "fidelity/{weights}.json"),),
    "fidelity_family": (RuleFile("family", "fidelity/families/{series}.json"),),
    "overview": (RuleFile("overview", "summary/overview.html"),),
    "html_report": (RuleFile("html", "report.html"),),
}


RULE_PATHS = {(rule, file.key): file.path for rule, files in RULE_FILES.items() for file in files}


def rule_file(rule: str, key: str) -> str:
    """The path under results_dir of one of a rule's files."""
    return RULE_PATHS[rule, key]


def optional_figure_rules(cells: Sequence[Cell]) -> list[str]:
    """The rules of summary figures a matrix gets only when they can say something: throughput
    vs concurrency for cells at two or more concurrencies that are no sweep's points (a sweep has
    its own figures: sweep_outputs), measured vs published when references exist."""
    rules = []
    if matrix_sweeps_concurrency(cells):
        rules.append("concurrency_figure")
    if any(cell.reference for cell in cells):
        rules.append("reference_figure")
    return rules


def optional_summary_figures(cells: Sequence[Cell]) -> list[str]:
    """The names of those rules' figures."""
    return [PurePosixPath(RULE_FILES[rule][0].path).stem for rule in optional_figure_rules(cells)]


# The front page's answers beside the index (the overview rule): what a token costs (every
# matrix: one line where nothing was measured), where a drafter stops paying
# (a matrix with sweeps), the largest load within a latency goal (one with searches), the
# fastest quant within a fidelity goal (one with compared quants), the drafter's gain by what
# it drafts (drafter cells on two kinds of content) and TTFT by conversation turn (one with
# conversations), each a table under summary/ and the figures shown below it.
FRONT_PAGE_ANSWERS = {
    "energy": ("energy_frontier",),  # what a token costs (outputs/energy/front.py)
    "spec_crossover": ("pareto", "spec_gain_sweep"),
    "slo": ("slo_search",),
    "fidelity_frontier": ("fidelity",),
    "gain_by_content": (),
    "by_turn": (),
}
CONVERSATION = "conversation"  # DatasetSettings.content_label of whole conversations


def content_answers(cells: Sequence[Cell]) -> list[str]:
    """The aggregate rule's tables (by name) the front page shows for this matrix:
    gain_by_content where drafter cells that are no sweep point or probe ran on two or more
    kinds of content (the gain on code beside chat), by_turn where some cell replayed
    conversations."""
    content = {cell.id: cell.workload_spec.dataset.content_label for cell in cells}
    drafted = {content[c.id] for c in cells if c.has_drafter and c.sweep is None}
    tables = ["gain_by_content"] if len(drafted) >= 2 else []
    if CONVERSATION in content.values():
        tables.append("by_turn")
    return tables


def front_page_files(summary_files: Sequence[str]) -> list[str]:
    """The files among `summary_files` (a matrix's sweep and search outputs) the front page
    shows: each answer's table (CSV) and figures (PNG)."""
    names = {f"{table}.csv" for table in FRONT_PAGE_ANSWERS}
    names |= {f"{figure}.png" for figures in FRONT_PAGE_ANSWERS.values() for figure in figures}
    return [path for path in summary_files if path.rsplit("/", 1)[-1] in names]


def sweep_cell_ids(cells: Sequence[Cell]) -> list[str]:
    """The cells that are points of a sweep (their repeats too): what the sweeps rule reads."""
    return [cell.id for cell in cells if cell.sweep is not None]


def sweep_outputs(cells: Sequence[Cell]) -> list[str]:
    """The sweeps rule's files under summary/ (tables as CSV and markdown, their HTML page, the
    figures; an SVG beside each PNG), for a matrix with at least one sweep; none without."""
    if not sweep_cell_ids(cells):
        return []
    return [file.path.removeprefix("summary/") for file in RULE_FILES["sweeps"]]


def report_labels(cell: Cell, figure: str) -> dict[str, str]:
    """Labels of a cell's outputs in the Snakemake report (its model is the subcategory)."""
    return {
        "cell": cell.id,
        "engine": cell.engine,
        "quant": cell.quant,
        "drafter": cell.drafter,
        "workload": cell.workload,
        "figure": figure,
    }
