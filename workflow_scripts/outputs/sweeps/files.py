"""The sweeps rule's body: read the points' metrics.json and requests.jsonl, build the sweep tables
(build.py), write each as CSV (every column) and markdown (the columns a reader compares), one
HTML page of them for the report, and the sweep figures (plots.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ...atomic import write_text
from ...loadgen.metrics import SEND_LAG_LIMIT_PCT
from ...loadgen.records import RequestRecord
from ...verdicts.families import p_text
from ...vocabulary import Cell, CellMetrics, Status
from ..compact import is_missing, number_text, with_interval
from ..energy.frontier import write_energy_frontier
from ..fidelity.compared import drafter_outputs
from ..record_index import read_index
from ..repeats import collapse_repeats
from ..report_html import esc, html_table, page
from ..writers import load_indexed, to_markdown
from .build import SweepTables, sweep_tables
from .cards import series_sections
from .frontier import frontier_stretches
from .gain import reference_note

SWEEPS_TITLE = "Sweeps: one row per point"
SWEEPS_INTRO = (
    "Each point of a series (one model, engine, quant, drafter and workload at several loads) "
    "is a cell of its own. Interactivity = 1000 / TPOT median: the tokens per second one user "
    "sees. `value ± h`: h is the half-width of the figure's 95 % interval, from the point's "
    "repeats (≥ 3) or a bootstrap over its requests, as in the summary. sweeps.csv holds every "
    "column (the intervals' ends, per-GPU throughput, the cells' own names). `disturbed`: other "
    "work on the machine crossed the config's `checks` during the point's bench (the frontier, "
    "the gain and the crossover say so where they rest on such a point). Under open-loop "
    "arrivals (a trace, Poisson `request_rate`) TTFT from the schedule counts each request from "
    "when it was due, its wait for a free slot included (TTFT and E2E from the send leave it "
    "out), and `sent late` marks a point whose send lag passed "
    f"{SEND_LAG_LIMIT_PCT:g} % of its TTFT at the median or at p99."
)
PARETO_TITLE = "Throughput against interactivity: the frontier"
PARETO_INTRO = (
    "The points no other point beats on both decode tok/s and interactivity (a point with at "
    "least as much of both and more of one), over every finished point of every series, by "
    "interactivity rising. A stretch is a run of consecutive frontier points one series owns. "
    "The frontier is of the headline figures; two points whose intervals overlap may swap."
)
GAIN_TITLE = "Speculative decoding at each point of a sweep"
GAIN_INTRO = (
    "Each point of a drafter series beside the same point of its base series (drafter none, "
    "same model, engine, quant and workload, the same points), with the spec-gain table's gain, "
    "95 % interval and verdict. A series' verdicts are one family: `verdict` is Holm's "
    "step-down at 5 % over the series' tested points (`p (Holm)`: the point's own p-value, from "
    "the paired randomization test or the repeats' t-test, then the adjusted one), so a drafter "
    "that changes nothing reads faster or slower at some point of a series in at most 5 % of "
    "runs; spec_gain_sweep.csv keeps each point's own (`verdict_unadjusted`). `outputs`: its "
    "greedy outputs against its base's (fidelity.md), judged the same way, then pooled over "
    "the series' points (`outputs_pooled`, an exact stratified test). Acceptance should not "
    "move with load under greedy decoding: `acceptance differs` marks a point whose interval "
    "leaves out the median of the series' other points, as one of the series' points (Holm)."
)
CROSSOVER_TITLE = "Where a drafter stops paying"
CROSSOVER_INTRO = (
    "One row per drafter series: the last point (by load) where it is faster than its base and "
    "the first where it is not (slower, or no detectable difference), skipping points without "
    "a verdict; the gain and interval each rests on are in spec_crossover.csv. The verdicts are "
    "the family's (`family`: Holm's step-down at 5 % over the series' points), and a point "
    "faster or slower on its own only is named in the summary. `outputs`: the drafter's greedy "
    "outputs against its base's, each point as one of the series', then one verdict pooled "
    "over the points (an exact stratified test, where thin evidence at every point adds up "
    "and no one point decides alone), and where the points disagree with it."
)


def _number(value: Any) -> float | None:
    return None if is_missing(value) else float(value)


def _interval(row: Mapping[str, Any], key: str, digits: int = 1) -> str:
    """`+12.3 [+4.0, +20.1]`: a change in % with its interval."""
    value, lo, hi = (
        row.get(key),
        row.get(key.replace("_pct", "_lo_pct")),
        row.get(key.replace("_pct", "_hi_pct")),
    )
    if is_missing(value):
        return ""
    text = f"{value:+.{digits}f}"
    if not (is_missing(lo) or is_missing(hi)):
        text += f" [{lo:+.{digits}f}, {hi:+.{digits}f}]"
    return text


def sweeps_view(sweeps: pd.DataFrame) -> pd.DataFrame:
    """sweeps.md: the point, its status and its figures as `value ± half-width`."""
    rows = []
    open_loop = sweeps["ttft_from_schedule_median_ms"].notna().any()
    for row in sweeps.to_dict("records"):
        done = row["status"] == Status.DONE
        shown = {"series": row["series"], "point": row["point"], "status": row["status"]}
        for key, digits in (
            ("decode_tok_s", 1),
            ("interactivity_tok_s", 2),
            ("tpot_median_ms", 1),
            ("tpot_p99_ms", 1),
            ("ttft_median_ms", 0),
            ("ttft_p99_ms", 0),
            ("req_per_s", 3),
        ):
            shown[key] = with_interval(row, key, digits) if done else ""
        shown["errors"] = number_text(row["errors"]) if done else ""
        if sweeps["gpus"].notna().any():
            shown["decode_tok_s_per_gpu"] = with_interval(row, "decode_tok_s_per_gpu", 1)
        start = row.get("server_start")
        position = row.get("server_start_position")
        shown["server_start"] = (
            ""
            if is_missing(start)
            else f"{start}" + ("" if is_missing(position) else f" #{position}")
        )
        if sweeps["j_per_output_token"].notna().any():
            shown["J/output token"] = number_text(row.get("j_per_output_token"), 4)
        if sweeps["usd_per_m_output_tokens"].notna().any():
            shown["$/M output tokens"] = number_text(row.get("usd_per_m_output_tokens"), 4)
        shown["reason"] = "" if done else (row.get("reason") or "")
        shown["disturbed"] = "yes" if row.get("disturbed") is True else ""
        if open_loop:
            for key in ("ttft_from_schedule_median_ms", "ttft_from_schedule_p99_ms"):
                shown[key] = number_text(row.get(key), 0) if done else ""
            shown["sent late"] = "yes" if row.get("send_lag_flagged") is True else ""
        rows.append(shown)
    return pd.DataFrame(rows, columns=list(rows[0]) if rows else ["series", "point", "status"])


def gain_view(gains: pd.DataFrame) -> pd.DataFrame:
    """spec_gain_sweep.md: gain and TPOT change with their intervals, acceptance with its."""
    rows = []
    for row in gains.to_dict("records"):
        acceptance = number_text(row.get("acceptance_rate"), 3)
        if acceptance and not is_missing(row.get("acceptance_rate_lo")):
            acceptance += f" [{row['acceptance_rate_lo']:.3f}, {row['acceptance_rate_hi']:.3f}]"
        shown = {
            "series": row["series"],
            "point": row["point"],
            "decode gain %": _interval(row, "decode_gain_pct"),
            "verdict": row.get("verdict") or "",
            "p (Holm)": p_text(_number(row.get("p_value")), _number(row.get("p_adjusted"))),
            "TPOT change %": _interval(row, "tpot_change_pct"),
            "acceptance": acceptance,
            "accepted length": number_text(row.get("acceptance_length")),
            "acceptance differs": {True: "yes", False: "no"}.get(row.get("acceptance_differs"), ""),
            "flags": "; ".join(f for f in (row.get("flags"), row.get("acceptance_note")) if f),
        }
        if gains["energy_change_pct"].notna().any():  # some pair's energy was measured
            shown["energy change %"] = _interval(row, "energy_change_pct")
            shown["energy verdict"] = row.get("energy_verdict") or ""
            shown["energy p (Holm)"] = p_text(
                _number(row.get("energy_p_value")), _number(row.get("energy_p_adjusted"))
            )
        if gains["outputs"].notna().any():
            shown["outputs"] = row.get("outputs") or ""
            shown["outputs p (Holm)"] = p_text(
                _number(row.get("outputs_p_value")), _number(row.get("outputs_p_adjusted"))
            )
        for column in ("ref_decode_gain_pct", "ref_acceptance_rate"):
            if gains[column].notna().any():
                shown[column] = number_text(row.get(column))
        rows.append(shown)
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=["series", "point"])


CROSSOVER_VIEW = [
    "series",
    "last_faster",
    "first_not_faster",
    "summary",
    "energy_summary",  # shown where some point's energy was measured
    "outputs",
    "family",
    "interval_source",
    "rests_on_disturbed",
]


def sections_markdown(sections: Sequence[tuple[str, list[str]]]) -> str:
    parts = ["## Each series", ""]
    for title, lines in sections:
        parts += [f"### {title}", "", *[f"- {line}" for line in lines], ""]
    return "\n".join(parts)


def sections_html(sections: Sequence[tuple[str, list[str]]]) -> str:
    parts = ["<h2>Each series</h2>"]
    for title, lines in sections:
        items = "".join(f"<li>{esc(line)}</li>" for line in lines)
        parts.append(f"<h3>{esc(title)}</h3><ul>{items}</ul>")
    return "".join(parts)


def write_sweep_tables(tables: SweepTables, out: Mapping[str, str | Path]) -> None:
    """The four tables as CSV and markdown, and sweeps.html holding them for the report."""
    sections = series_sections(tables.sweeps, tables.pareto, tables.spec_crossover)
    crossover_view = [
        c
        for c in CROSSOVER_VIEW
        if c != "energy_summary"
        or tables.spec_crossover[c].map(lambda v: bool(v) and isinstance(v, str)).any()
    ]
    stretches = frontier_stretches(tables.pareto)
    gain_intro = " ".join(x for x in (GAIN_INTRO, reference_note(tables.spec_gain_sweep)) if x)
    views = [
        ("sweeps", SWEEPS_TITLE, sweeps_view(tables.sweeps), SWEEPS_INTRO, tables.sweeps),
        ("pareto", PARETO_TITLE, tables.pareto, PARETO_INTRO, tables.pareto),
        (
            "spec_gain_sweep",
            GAIN_TITLE,
            gain_view(tables.spec_gain_sweep),
            gain_intro,
            tables.spec_gain_sweep,
        ),
        (
            "spec_crossover",
            CROSSOVER_TITLE,
            tables.spec_crossover[crossover_view],
            CROSSOVER_INTRO,
            tables.spec_crossover,
        ),
    ]
    for name, title, view, intro, frame in views:
        write_text(out[f"{name}_csv"], frame.to_csv(index=False))
        text = to_markdown(view, title, intro)
        if name == "sweeps":
            text += "\n" + sections_markdown(sections)
        if name == "pareto":
            text += "\n" + to_markdown(stretches, "Who owns each stretch").replace("# ", "## ", 1)
        write_text(out[f"{name}_md"], text)
    body = ""
    for name, title, view, intro, _ in views:
        body += f"<h2>{esc(title)}</h2><p>{esc(intro)}</p>{html_table(view)}"
        if name == "pareto":
            body += f"<h3>Who owns each stretch</h3>{html_table(stretches)}"
    body += sections_html(sections)
    write_text(out["sweeps_html"], page("Sweeps", body))
    write_energy_frontier(
        tables.sweeps, tables.energy_frontier, out["energy_frontier_csv"], out["energy_frontier_md"]
    )


def write_sweep_figures(tables: SweepTables, out: Mapping[str, str | Path]) -> None:
    """Each sweep figure the rule names among its outputs, as PNG + SVG."""
    from ..energy import plot as energy_plot
    from ..plots import save_figure  # matplotlib: only the rule that draws pays its import
    from . import plots as plots_sweeps

    figures = {
        "pareto_plot": lambda: plots_sweeps.pareto_figure(tables.sweeps, tables.pareto),
        "latency_plot": lambda: plots_sweeps.sweep_latency_figure(tables.sweeps),
        "spec_gain_plot": lambda: plots_sweeps.spec_gain_sweep_figure(tables.spec_gain_sweep),
        "energy_frontier_plot": lambda: energy_plot.energy_frontier_figure(
            tables.sweeps, tables.energy_frontier
        ),
    }
    for key, build in figures.items():
        if out.get(key) is not None:
            save_figure(build(), out[key])


def write_sweeps(
    all_metrics: Sequence[CellMetrics],
    cells: Sequence[Cell],
    records: Mapping[str, Sequence[RequestRecord]],
    gpus: Mapping[str, int | None],
    out: Mapping[str, str | Path],
    prices: Mapping[str, Any] | None = None,
) -> SweepTables:
    """Every sweep output from the points' metrics and records, repeats folded in here (after
    the drafters' outputs are compared: the floor runs are folded away); `prices` each point's
    price (config `cost`)."""
    outputs = drafter_outputs(cells, records, all_metrics)
    all_metrics, cells, records = collapse_repeats(all_metrics, cells, records)
    tables = sweep_tables(
        all_metrics, cells, records, gpus, outputs.by_cell, outputs.by_series, prices
    )
    write_sweep_tables(tables, out)
    write_sweep_figures(tables, out)
    return tables


def write_sweep_outputs(
    records_index: str | Path,
    cells: Sequence[Cell],
    gpus: Mapping[str, int | None],
    out: Mapping[str, str | Path],
    prices: Mapping[str, Any] | None = None,
) -> SweepTables:
    """The `sweeps` rule's outputs (paths in `out`) from the records index: only the points'
    records are read (`gpus` holds each point's `resources.gpu`, keyed by the cells this rule
    reads; `prices` each cell's price)."""
    all_metrics, records = load_indexed(read_index(records_index, only=list(gpus)))
    return write_sweeps(all_metrics, cells, records, gpus, out, prices)
