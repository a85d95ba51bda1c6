"""The report's front page answer to "what does a token cost" (front_page.py shows it first
among the answers): where energy was measured, each measured cell's joules per output token,
output tokens per joule, joules per prompt + output token and, where priced, dollars per million
output tokens with the basis, and the energy frontier's figure where a sweep drew it; where
nothing was measured, one line saying so and why."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...vocabulary import ENERGY_MEASURED
from ..report_html import esc, figure_html, html_table
from .table import basis_text_of
from .view import not_measured_lines

TITLE = "What a token costs"
INTRO = (
    "Each cell whose energy was measured: joules per output token over its bench window "
    "(gross: the idle draw included), output tokens per joule, joules per prompt + output token, "
    "and where a price is given, dollars per million output tokens on the basis named. A GPU's "
    "figure is its board energy, a lower bound on the machine's; a CPU's package counter holds "
    "the whole socket. energy.md has every figure, the windows and the intervals."
)
FRONTIER_CAPTION = "Output tokens per joule against interactivity: the frontier"
COLUMNS = {
    "cell": "cell",
    "source": "source",
    "j_per_output_token": "J/output token",
    "output_tokens_per_j": "output tokens/J",
    "j_per_token": "J/token (prompt + output)",
}


def _numbers(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    for column in columns:
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def token_cost_html(energy_csv: str | Path, frontier_png: str | Path | None = None) -> list[str]:
    """The front page's part: a section where some cell was measured, else one line (none
    where no cell ran)."""
    frame = pd.read_csv(energy_csv, dtype=str, keep_default_na=False)
    done = frame[frame["energy_status"] == ENERGY_MEASURED]
    if done.empty:
        rows = [
            {"cell": c, "energy_status": s, "energy_note": n}
            for c, s, n in zip(frame["cell"], frame["energy_status"], frame["note"], strict=True)
        ]
        return [f"<p>{esc(line)}</p>" for line in not_measured_lines(rows)[:1]]
    shown = _numbers(done[list(COLUMNS)].copy(), list(COLUMNS)[2:]).rename(columns=COLUMNS)
    priced = done["cost_basis"] != ""
    if priced.any():
        shown["$/M output tokens"] = pd.to_numeric(done["usd_per_m_output_tokens"], errors="coerce")
        shown["basis"] = [
            basis_text_of({**row, "cost_price": float(row["cost_price"])})
            if row["cost_basis"]
            else ""
            for row in done.to_dict("records")
        ]
    shown["note"] = done["note"]
    parts = [f"<h2>{esc(TITLE)}</h2>", f"<p>{esc(INTRO)}</p>", html_table(shown)]
    if frontier_png is not None:
        parts.append(figure_html(frontier_png, FRONTIER_CAPTION))
    return parts
