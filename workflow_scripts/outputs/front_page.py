"""The report's front page (the `overview` rule, included by report/workflow.rst): the index,
then what a token costs (outputs/energy/front.py: one line where energy was not measured), then
what a matrix's sweeps, searches, fidelity pairs and workloads answer (where a drafter
stops paying and whether it changes the outputs, the largest load within a latency goal, the
fastest quant within a fidelity goal, the drafter's gain by content, TTFT by conversation
turn) with their figures, then every summary figure, embedded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..atomic import write_text
from ..vocabulary import SERVING_COLUMNS
from .conversations import BY_TURN_INTRO, BY_TURN_TITLE
from .energy.front import token_cost_html
from .fidelity.frontier import FRONTIER_INTRO, FRONTIER_TITLE
from .labels import FRONT_PAGE_ANSWERS
from .report_html import STYLE, esc, figure_html, html_table
from .spec_gain import CONTENT_GAIN_COLUMNS, GAIN_BY_CONTENT_INTRO, GAIN_BY_CONTENT_TITLE
from .sweeps.files import CROSSOVER_INTRO, CROSSOVER_TITLE
from .writers import INDEX_INTRO

FIGURE_TITLES = {
    "decode_tok_s": "Decode tok/s per cell",
    "latency": "TTFT and TPOT per cell",
    "peak_memory": "Peak memory per cell",
    "spec_gain": "Speculative decoding: base vs drafter",
    "throughput_vs_concurrency": "Decode tok/s vs concurrency",
    "measured_vs_reference": "Measured vs published reference",
    "pareto": "Throughput against interactivity: the frontier",
    "spec_gain_sweep": "The drafter's gain across load",
    "slo_search": "Latency goal: each probe of each search",
    "fidelity": "Speed against fidelity: the frontier",
    "energy_frontier": "Output tokens per joule against interactivity: the frontier",
}

SLO_TITLE = "The largest load within the latency goal"
SLO_INTRO = (
    "One row per searched series: the largest load that meets the goal and the smallest that "
    "fails it; goodput counts the completion tokens of the requests that met every objective, "
    "per second, at the largest passing load. slo.md has each probe and how it was decided."
)


@dataclass(frozen=True)
class AnswerTable:
    """How the front page shows one answer's table: its section, title and intro, the columns
    a reader needs, which of them are loads (a concurrency or a request rate) and which are
    numbers, and the figures that draw its rows (left out with them)."""

    section: str
    title: str
    intro: str
    columns: tuple[str, ...]
    loads: tuple[str, ...]
    numbers: tuple[str, ...] = ()
    figures_of_rows: tuple[str, ...] = ()
    shown_when_filled: tuple[str, ...] = ()  # left out where no row has a value


ANSWER_TABLES = {
    "spec_crossover": AnswerTable(
        "Load sweeps",
        CROSSOVER_TITLE,
        CROSSOVER_INTRO,
        (
            "series",
            "axis",
            "last_faster",
            "first_not_faster",
            "summary",
            "energy_summary",
            "outputs",
        ),
        ("last_faster", "first_not_faster"),
        figures_of_rows=("spec_gain_sweep",),
        # a matrix that measured the points' energy; one that compares the drafter's outputs
        shown_when_filled=("energy_summary", "outputs"),
    ),
    "slo": AnswerTable(
        "Latency goal",
        SLO_TITLE,
        SLO_INTRO,
        (
            "series",
            "slo",
            "over",
            "largest_passing",
            "smallest_failing",
            "goodput_decode_tok_s",
            "j_per_output_token",
            "usd_per_m_output_tokens",
            "rests_on_disturbed",
        ),
        ("largest_passing", "smallest_failing"),
        numbers=("goodput_decode_tok_s", "j_per_output_token", "usd_per_m_output_tokens"),
        # energy measured at the answer, a price given; a probe other work disturbed
        shown_when_filled=("j_per_output_token", "usd_per_m_output_tokens", "rests_on_disturbed"),
    ),
    "gain_by_content": AnswerTable(
        "The drafter by content",
        GAIN_BY_CONTENT_TITLE,
        GAIN_BY_CONTENT_INTRO,
        (*SERVING_COLUMNS, "content", *CONTENT_GAIN_COLUMNS),
        (),
        numbers=("decode_gain_pct", "decode_gain_lo_pct", "decode_gain_hi_pct", "acceptance_rate"),
        shown_when_filled=("outputs",),
    ),
    "by_turn": AnswerTable(
        "Conversations",
        BY_TURN_TITLE,
        BY_TURN_INTRO,
        (
            "model",
            "engine",
            "quant",
            "workload",
            "prefix_cache",
            "turn",
            "requests",
            "ttft_median_ms",
            "tpot_median_ms",
            "prefix_cache_hit_pct",
        ),
        (),
        numbers=("ttft_median_ms", "tpot_median_ms", "prefix_cache_hit_pct"),
        shown_when_filled=("prefix_cache_hit_pct",),
    ),
    "fidelity_frontier": AnswerTable(
        "Output fidelity",
        FRONTIER_TITLE,
        FRONTIER_INTRO,
        ("model", "engine", "workload", "quant", "decode_tok_s", "measure", "loss", "answer"),
        (),
        numbers=("decode_tok_s", "loss"),
        figures_of_rows=("fidelity",),
    ),
}


def _load_text(value: str) -> str:
    """A load as the config wrote it: `3`, not the `3.0` of a CSV column with gaps."""
    return f"{float(value):g}" if value else ""


def _filled(value: object) -> bool:
    """A cell with a figure or text (a 0 % is a figure; blank and NaN are none)."""
    return not (value == "" or pd.isna(value))


def answer_rows(stem: str, path: str | Path) -> pd.DataFrame:
    """The rows of one answer's table the front page shows (numbers as numbers)."""
    table = ANSWER_TABLES[stem]
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)[list(table.columns)]
    for column in table.loads:
        frame[column] = frame[column].map(_load_text)
    for column in table.numbers:
        frame[column] = pd.to_numeric(frame[column], errors="coerce")  # "": not measured
    empty = [c for c in table.shown_when_filled if not frame[c].map(_filled).any()]
    return frame.drop(columns=empty)


def answers_html(answers: Sequence[str]) -> list[str]:
    """A section per answer the files `answers` hold, in FRONT_PAGE_ANSWERS' order: the table
    and its figures, those of its rows only when it has rows (a sweep without a drafter has a
    frontier, no crossover and no gain); none for an answer with no rows and no other figure
    (a matrix whose drafters are compared but no quant: no speed-fidelity frontier)."""
    by_name = {Path(path).name: path for path in answers}
    parts = []
    for stem, figure_stems in FRONT_PAGE_ANSWERS.items():
        if f"{stem}.csv" not in by_name:
            continue
        if stem == "energy":  # what a token costs: its own shape (outputs/energy/front.py)
            figure = by_name.get(f"{figure_stems[0]}.png")
            parts += token_cost_html(by_name[f"{stem}.csv"], figure)
            continue
        table = ANSWER_TABLES[stem]
        frame = answer_rows(stem, by_name[f"{stem}.csv"])
        if not len(frame) and set(figure_stems) <= set(table.figures_of_rows):
            continue  # nothing to show: a matrix that compares outputs but no quants
        parts.append(f"<h2>{esc(table.section)}</h2>")
        if len(frame):
            parts += [f"<h3>{esc(table.title)}</h3>", f"<p>{esc(table.intro)}</p>"]
            parts.append(html_table(frame))
        parts += [
            figure_html(by_name[f"{figure}.png"], FIGURE_TITLES[figure])
            for figure in figure_stems
            if f"{figure}.png" in by_name and (len(frame) or figure not in table.figures_of_rows)
        ]
    return parts


def overview_fragment(
    index: pd.DataFrame,
    figures: Sequence[tuple[str, str | Path]],
    notes: Sequence[str] = (),
    answers: Sequence[str] = (),
) -> str:
    """The front page's body: the index table, the answers' sections, every summary figure."""
    parts = [f"<style>{STYLE}</style>", '<div class="llmbench-overview">', "<h2>Index</h2>"]
    parts += [f"<p>{esc(n)}</p>" for n in notes]
    parts.append(html_table(index))
    parts += answers_html(answers)
    parts.append("<h2>Figures</h2>")
    parts += [figure_html(path, caption) for caption, path in figures]
    parts.append("</div>")
    return "\n".join(parts) + "\n"


def write_overview(
    path: str | Path,
    index_csv: str | Path,
    figures: Sequence[str | Path],
    answers: Sequence[str] = (),
) -> None:
    """The `overview` rule's output: the front page of index.csv, the answers' files and the
    summary figures (each captioned by its file's stem)."""
    index = pd.read_csv(index_csv, dtype=str, keep_default_na=False)
    captioned = [(FIGURE_TITLES.get(Path(p).stem, Path(p).stem), p) for p in figures]
    write_text(path, overview_fragment(index, captioned, [INDEX_INTRO], answers))
