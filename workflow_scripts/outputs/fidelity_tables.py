"""The fidelity table (`summary/fidelity.csv` / `.md`): each compared cell against its reference
(fidelity.pairs) by greedy agreement, with the noise floor and a verdict, and for GGUF quants the
KL divergence from the reference's logits; the fidelity goal judged on both; the speed-fidelity
frontier (`fidelity_frontier.csv`) and its answer, the fastest quant within the goal.

The same agreements flag a drafter whose outputs changed wherever its gain is shown
(`drafter_outputs`: spec_gain, spec_gain_sweep, spec_crossover), a sweep point's as one of its
series' points, with the series' pooled verdict (fidelity.series)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ..atomic import write_text
from ..fidelity.agreement import NO_VERDICT, Agreement, compare_outputs
from ..fidelity.goals import KLD_FIGURES, NOT_MEASURED, FidelityFigures, FidelityGoal, judge
from ..fidelity.judgement import Run, judge_runs
from ..fidelity.kld_plan import kld_problem
from ..fidelity.pairs import (
    DRAFTER,
    FLOOR,
    QUANT,
    FidelitySettings,
    Pair,
    fidelity_pairs,
    floor_id,
)
from ..fidelity.series import PointVerdict, SeriesVerdict, family_columns, judge_families
from ..process.machine_use import disturbed, disturbed_note
from ..verdicts.families import p_text, verdict_text
from ..vocabulary import Cell
from .report_html import write_tables_html
from .writers import to_markdown

# A GGUF quant's llama-perplexity figures (fidelity/<model>__<quant>.json), by their names there.
KLD_COLUMNS = (
    "kld_mean",
    "kld_mean_err",
    "kld_p99",
    "same_top_pct",
    "same_top_pct_err",
    "perplexity",
    "perplexity_err",
)
FIDELITY_COLUMNS = [
    "cell",
    "reference_cell",
    "kind",
    "model",
    "engine",
    "quant",
    "drafter",
    "workload",
    "prompts_compared",
    "unpaired",  # answered by both under one prompt and turn, sent as other texts: not compared
    "identical_pct",
    "identical_lo_pct",
    "identical_hi_pct",
    "floor_identical_pct",
    "first_divergence_median",
    "first_divergence_q1",
    "first_divergence_q3",
    "verdict",
    "verdict_reason",
    *KLD_COLUMNS,
    "kld_note",
    "decode_tok_s",
    "goal_verdict",
    "goal_detail",
    # appended: the verdict's test and its family (fidelity.series): a sweep point's pair is one
    # of its series' points, `verdict` its Holm-adjusted one, `series_verdict` the pooled one
    "p_value",
    "p_adjusted",
    "verdict_unadjusted",
    "family",
    "series",
    "series_verdict",
    "series_p_value",
    "series_note",
]
FRONTIER_COLUMNS = [
    "model",
    "cell",
    "engine",
    "workload",
    "quant",
    "decode_tok_s",
    "measure",
    "loss",
    "goal_verdict",
    "answer",
    "disturbed",  # other work on the machine during the cell's bench (machine_use.disturbed)
]
FIDELITY_INTRO = (
    "Each cell against the cell it is compared with, on the same prompts: `quant` against the "
    "model's reference quant on the same engine, `drafter` against the same point without it, "
    "`engine` against the reference quant on another engine, `floor` the reference against a "
    "second run of itself (how often two runs of one configuration give the same greedy output). "
    "identical_pct: outputs identical to the reference's, with a 95 % Wilson interval; first "
    "divergence in characters. Verdict `changed`: agreement below the floor by a one-sided "
    "Fisher exact test at 5 % (at most 5 % of pairs that agree as often as the floor are called "
    "changed); `unresolved`: too few prompts to tell, or no floor measured and outputs differ; "
    "`no verdict`: the reference or its floor run did not finish, or no answer was left to "
    "compare (errored, or both empty: no evidence of agreement). "
    "Requests pair by prompt, turn and the prompt's text as sent: `not paired` counts those both "
    "cells answered under one prompt but sent as other texts (an engine that fits a trace's "
    "prompts in its own tokens, a conversation whose history is the model's own answers). "
    "A sweep point is one of its series' points: its verdict is Holm's step-down at 5 % over "
    "the series' tested points (`p (Holm)`: its own p-value, then the adjusted one), so a series "
    "whose outputs do not change reads `changed` at some point in at most 5 % of runs; `series "
    "(pooled)`: the series' one verdict, an exact stratified test over its points (each point's "
    "pair against its own floor), where thin evidence at every point adds up. "
    "KL divergence, same-top-token % and perplexity: llama-perplexity against the reference's "
    "logits on one fixed text (± the tool's standard error)."
)
FRONTIER_TITLE = "Speed against fidelity: the fastest quant within the goal"
FRONTIER_INTRO = (
    "Per model, engine and workload: the reference quant and the quants compared with it, "
    "decode tok/s against fidelity loss (KL mean where every quant has one, else the share of "
    "outputs not identical to the reference's); the rows are the non-dominated quants, and "
    "`answer` marks the fastest within the fidelity goal. `disturbed`: other work on the "
    "machine crossed the config's `checks` during that cell's bench; an answer whose choice "
    "rests on such a cell says so."
)
NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class Compared:
    """One pair's agreement (None: not compared, a run did not finish), its reference's floor
    (None: no floor run, or not usable) and the verdict (fidelity.judgement); a sweep point's
    pair as one of its series' points too (`point`, `series`: the family's verdicts, which
    `verdict` and `reason` then are)."""

    pair: Pair
    agreement: Agreement | None
    floor: Agreement | None
    verdict: str
    reason: str
    point: PointVerdict | None = None
    series: SeriesVerdict | None = None

    @property
    def evidence(self) -> Agreement | None:
        """The agreement a goal may judge: None where the pair has no verdict."""
        return None if self.verdict == NO_VERDICT else self.agreement


def cell_runs(
    all_metrics: Sequence[Mapping[str, Any]], records: Mapping[str, Sequence[Any]]
) -> dict[str, Run]:
    """Each cell with records, as a judgement reads it: its status and reason beside them."""
    return {m["cell"]: Run.of(m, records[m["cell"]]) for m in all_metrics if m["cell"] in records}


def compared_pairs(
    cells: Sequence[Cell], runs: Mapping[str, Run], references: Mapping[str, str]
) -> list[Compared]:
    """Every pair whose cell finished, judged (fidelity.judgement.judge_runs: a reference or
    floor run that did not finish gives no verdict); a floor pair's floor is itself; a sweep
    series' pairs of one kind that have a verdict judged as a family
    (fidelity.series.judge_families)."""
    out = []
    for pair in fidelity_pairs(cells, references):
        cell, reference = runs.get(pair.cell), runs.get(pair.reference_cell)
        if cell is None or reference is None or not cell.finished:
            continue  # not run, or failed: the summary says why
        if pair.kind == FLOOR:  # the floor itself: no verdict of its own
            if reference.finished:
                agreement = compare_outputs(cell.records, reference.records)
                out.append(Compared(pair, agreement, agreement, "", ""))
            continue
        judged = judge_runs(cell, reference, runs.get(floor_id(pair.reference_cell)))
        out.append(Compared(pair, judged.agreement, judged.floor, judged.verdict, judged.reason))
    judged_pairs = [i for i, c in enumerate(out) if c.verdict != NO_VERDICT]
    found = judge_families(
        [(out[i].pair, out[i].agreement, out[i].floor) for i in judged_pairs], cells
    )
    for i, family in zip(judged_pairs, found, strict=True):
        if family is not None:  # a floor's is None
            point, series = family
            out[i] = replace(
                out[i], verdict=point.verdict, reason=point.reason, point=point, series=series
            )
    return out


@dataclass(frozen=True)
class DrafterOutputs:
    """Each drafter cell's outputs verdict against its base (`unchanged`, `changed`,
    `unresolved`; `not recorded` without outputs), a sweep point's as one of its series'
    points; and each drafter sweep series judged as a family, with its pooled verdict."""

    by_cell: dict[str, str]
    by_series: dict[str, SeriesVerdict]


def drafter_outputs(
    cells: Sequence[Cell],
    records: Mapping[str, Sequence[Any]],
    all_metrics: Sequence[Mapping[str, Any]],
) -> DrafterOutputs:
    """What spec_gain, spec_gain_sweep, spec_crossover and the cards show beside the gain."""
    runs = cell_runs(all_metrics, records)
    compared = [
        c
        for c in compared_pairs(cells, runs, {})  # a drafter's base needs no reference quant
        if c.pair.kind == DRAFTER
    ]
    return DrafterOutputs(
        {c.pair.cell: NOT_RECORDED if _not_recorded(c) else c.verdict for c in compared},
        {c.series.series: c.series for c in compared if c.series is not None},
    )


def drafter_output_verdicts(
    cells: Sequence[Cell],
    records: Mapping[str, Sequence[Any]],
    all_metrics: Sequence[Mapping[str, Any]],
) -> dict[str, str]:
    """Each drafter cell -> its outputs' verdict against its base (`drafter_outputs`)."""
    return drafter_outputs(cells, records, all_metrics).by_cell


def _not_recorded(item: Compared) -> bool:
    return item.agreement is not None and not item.agreement.recorded


def read_kld(paths: Sequence[str | Path]) -> dict[str, dict[str, Any]]:
    """The KL divergence files (`fidelity/<model>__<quant>.json`) by weights key."""
    out = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        out[f"{data['model']}__{data['quant']}"] = data
    return out


def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _row(
    item: Compared,
    cell: Cell,
    metrics: Mapping[str, Any],
    kld: Mapping[str, Any] | None,
    goal: FidelityGoal | None,
) -> dict[str, Any]:
    agreement, floor = item.agreement, item.floor
    shown = agreement if agreement is not None and agreement.recorded else None
    lo, hi = (shown.interval_pct if shown else None) or (None, None)
    quartiles = (shown.first_divergence_quartiles if shown else None) or (None, None, None)
    row: dict[str, Any] = {
        "cell": item.pair.cell,
        "reference_cell": item.pair.reference_cell,
        "kind": item.pair.kind,
        "model": cell.model,
        "engine": cell.engine,
        "quant": cell.quant,
        "drafter": cell.drafter,
        "workload": cell.workload,
        "prompts_compared": shown.prompts_compared if shown else None,
        "unpaired": shown.unpaired if shown else None,
        "identical_pct": shown.identical_pct if shown else None,
        "identical_lo_pct": lo,
        "identical_hi_pct": hi,
        "floor_identical_pct": floor.identical_pct if floor and floor.recorded else None,
        "first_divergence_median": quartiles[1],
        "first_divergence_q1": quartiles[0],
        "first_divergence_q3": quartiles[2],
        "verdict": NOT_RECORDED if _not_recorded(item) else item.verdict,
        "verdict_reason": "the workload keeps no outputs" if _not_recorded(item) else item.reason,
        "decode_tok_s": _num(metrics.get("decode_tok_s")),
    }
    if item.pair.kind == FLOOR:
        row["verdict"] = row["verdict_reason"] = ""
    kld = kld if item.pair.kind == QUANT else None
    if kld_problem(kld):
        row["kld_note"] = kld_problem(kld)
    elif kld is not None:
        row.update({key: _num(kld.get(key)) for key in KLD_COLUMNS})
    if goal is not None and item.pair.kind != FLOOR:
        row["goal_verdict"], row["goal_detail"] = goal_judgement(goal, item.evidence, floor, kld)
    if shown and item.point is not None:
        row.update(family_columns(item.point, item.series))
    return row


def goal_judgement(
    goal: FidelityGoal,
    agreement: Agreement | None,
    floor: Agreement | None,
    kld: Mapping[str, Any] | None,
) -> tuple[str, str]:
    """The goal's verdict (`pass`, `fail`, `unresolved`, `not measured` when no objective's
    figure was measured) and one text per objective, for the table and the card. `agreement`
    None: none to judge (the pair has no verdict); a KL record that cannot be used
    (`kld_problem`) leaves its objectives unresolved, never passed."""
    problem = kld_problem(kld)
    kld = {} if kld is None or problem else kld
    figures = FidelityFigures.measured(
        kld_mean=_num(kld.get("kld_mean")),
        kld_mean_err=_num(kld.get("kld_mean_err")),
        kld_p99=_num(kld.get("kld_p99")),
        same_top_pct=_num(kld.get("same_top_pct")),
        same_top_err_pct=_num(kld.get("same_top_pct_err")),
        agreement=agreement if agreement is not None and agreement.recorded else None,
        floor=floor,
    )
    judged = judge(goal, figures, dict.fromkeys(KLD_FIGURES, problem) if problem else None)
    measured = any(o.verdict is not None for o in judged.objectives)
    return (str(judged.verdict) if measured else NOT_MEASURED), "; ".join(judged.texts)


def _goal(settings: FidelitySettings, model: str) -> FidelityGoal | None:
    raw = settings.goals.get(model)
    return FidelityGoal.from_dict(raw) if raw else None


def fidelity_table(
    cells: Sequence[Cell],
    all_metrics: Sequence[Mapping[str, Any]],
    records: Mapping[str, Sequence[Any]],
    kld: Mapping[str, Mapping[str, Any]],
    settings: FidelitySettings,
) -> pd.DataFrame:
    """One row per compared cell that finished, in matrix order, each reference's floor after
    its pairs; a pair whose reference or floor run did not finish says so (`no verdict`)."""
    by_id = {cell.id: cell for cell in cells}
    metrics = {m["cell"]: m for m in all_metrics}
    rows = []
    for item in compared_pairs(cells, cell_runs(all_metrics, records), settings.references):
        cell = by_id[item.pair.cell]
        rows.append(
            _row(
                item,
                cell,
                metrics[item.pair.cell],
                kld.get(cell.weights_key),
                _goal(settings, cell.model),
            )
        )
    table = pd.DataFrame(rows, columns=FIDELITY_COLUMNS)
    # a count, also beside a row that compared nothing (no verdict): 24, never 24.0
    return table.astype({"prompts_compared": "Int64"})


def _figure(row: Mapping[str, Any], key: str, digits: int, unit: str = "") -> str:
    """`value ± err` (the tool's standard error where it gives one), digits after the point."""
    value, err = _num(row.get(key)), _num(row.get(f"{key}_err"))
    if value is None:
        return ""
    return f"{value:.{digits}f}" + (f" ± {err:.{digits}f}" if err is not None else "") + unit


def _prompts_text(row: Mapping[str, Any]) -> str:
    """`24`, or `21 (3 not paired)` where some prompts were sent as other texts."""
    compared, unpaired = row["prompts_compared"], _num(row.get("unpaired"))
    if compared is None or pd.isna(compared):
        return ""
    return f"{compared:g}" + (f" ({unpaired:g} not paired)" if unpaired else "")


def fidelity_view(table: pd.DataFrame) -> pd.DataFrame:
    """fidelity.md's columns, as text: the id parts that differ from the reference, the share
    identical with its interval, the floor, the first divergence, the verdict, the KL figures
    at their own precision (a q8_0's KL mean is about 0.003) and the goal's verdict."""
    rows = []
    for row in table.to_dict("records"):
        identical = _num(row["identical_pct"])
        lo, hi = _num(row["identical_lo_pct"]), _num(row["identical_hi_pct"])
        floor = _num(row["floor_identical_pct"])
        first = _num(row["first_divergence_median"])
        rows.append(
            {
                "cell": row["cell"],
                "kind": row["kind"],
                "against": row["reference_cell"],
                "prompts": _prompts_text(row),
                "identical %": "" if identical is None else f"{identical:.1f} [{lo:.1f}, {hi:.1f}]",
                "floor %": "" if floor is None else f"{floor:.1f}",
                "first diff (chars)": "" if first is None else f"{first:g}",
                "verdict": (
                    f"{NO_VERDICT}: {row['verdict_reason']}"
                    if row["verdict"] == NO_VERDICT
                    else row["verdict"]
                ),
                "p (Holm)": p_text(_num(row.get("p_value")), _num(row.get("p_adjusted"))),
                "series (pooled)": verdict_text(
                    row["series_verdict"] if isinstance(row["series_verdict"], str) else None,
                    _num(row.get("series_p_value")),
                ),
                "KL mean": _figure(row, "kld_mean", 4) or (row.get("kld_note") or ""),
                "KL p99": _figure(row, "kld_p99", 4),
                "same top %": _figure(row, "same_top_pct", 2),
                "PPL": _figure(row, "perplexity", 3),
                "goal": row.get("goal_verdict") or "",
            }
        )
    return pd.DataFrame(rows)


def _dominated(point: Mapping[str, Any], others: Sequence[Mapping[str, Any]]) -> bool:
    return any(
        o["decode_tok_s"] >= point["decode_tok_s"]
        and o["loss"] <= point["loss"]
        and (o["decode_tok_s"] > point["decode_tok_s"] or o["loss"] < point["loss"])
        for o in others
    )


def frontier_points(
    table: pd.DataFrame, metrics: Mapping[str, Mapping[str, Any]], cells: Mapping[str, Cell]
) -> list[dict[str, Any]]:
    """Per model, engine and workload: the reference quant (loss 0) and each quant compared
    with it that has a speed and a fidelity figure, with `frontier` (non-dominated), `answer`
    (the fastest within the goal, where a goal is set, naming the disturbed quants its choice
    rests on) and `disturbed` (machine_use.disturbed)."""
    points: list[dict[str, Any]] = []
    quants = table[table["kind"] == QUANT]
    for (model, engine, workload), group in quants.groupby(
        ["model", "engine", "workload"], sort=False
    ):
        reference = group["reference_cell"].iloc[0]
        use_kld = group["kld_mean"].notna().all()
        measure = "kld_mean" if use_kld else "not_identical_pct"
        has_goal = group["goal_verdict"].notna().any()
        members = [
            {
                "cell": reference,
                "quant": cells[reference].quant,
                "decode_tok_s": _num(metrics[reference].get("decode_tok_s")),
                "loss": 0.0,
                "goal_verdict": "pass" if has_goal else None,
            }
        ]
        for row in group.to_dict("records"):
            loss = row["kld_mean"] if use_kld else _not_identical(row)
            members.append(
                {
                    "cell": row["cell"],
                    "quant": row["quant"],
                    "decode_tok_s": _num(row["decode_tok_s"]),
                    "loss": _num(loss),
                    "goal_verdict": row["goal_verdict"] if has_goal else None,
                }
            )
        members = [m for m in members if m["decode_tok_s"] is not None and m["loss"] is not None]
        passing = [m for m in members if m["goal_verdict"] == "pass"]
        fastest = max(passing, key=lambda m: m["decode_tok_s"]) if passing else None
        # the answer is chosen by the speeds of every quant within the goal
        shaky = [m["quant"] for m in passing if disturbed(metrics.get(m["cell"]))]
        for m in members:
            m.update(model=model, engine=engine, workload=workload, measure=measure)
            m["frontier"] = not _dominated(m, members)
            m["answer"] = "fastest within the goal" + disturbed_note(shaky) if m is fastest else ""
            m["disturbed"] = bool(disturbed(metrics.get(m["cell"])))
        points += members
    return points


def _not_identical(row: Mapping[str, Any]) -> float | None:
    identical = _num(row.get("identical_pct"))
    return None if identical is None else 100.0 - identical


def frontier_table(points: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """fidelity_frontier.csv: the frontier points, and the answer where it is off the frontier."""
    rows = [p for p in points if p["frontier"] or p["answer"]]
    return pd.DataFrame(rows, columns=FRONTIER_COLUMNS)


def write_fidelity(
    files: Sequence[Any],
    cells: Sequence[Cell],
    kld_paths: Sequence[str | Path],
    settings: FidelitySettings,
    out: Mapping[str, str | Path],
) -> None:
    """The `fidelity` rule's tables and figure, from the records index's `files`."""
    from .fidelity_plot import fidelity_figure  # matplotlib: only this rule pays its import
    from .plots import save_figure
    from .writers import load_indexed

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
