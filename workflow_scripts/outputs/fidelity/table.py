"""The fidelity table (`summary/fidelity.csv` / `.md`): each compared cell against its reference
(`compared`) by greedy agreement, with the noise floor and a verdict, and for GGUF quants the
KL divergence from the reference's logits; the fidelity goal judged on both (`goal_judgement`,
the card's too)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ...fidelity.agreement import NO_VERDICT, Agreement
from ...fidelity.goals import KLD_FIGURES, NOT_MEASURED, FidelityFigures, FidelityGoal, judge
from ...fidelity.kld_plan import kld_problem
from ...fidelity.pairs import FLOOR, QUANT, FidelitySettings
from ...fidelity.series import family_columns
from ...verdicts.families import p_text, verdict_text
from ...vocabulary import IDENTITY_COLUMNS, Cell, identity_columns
from .compared import NOT_RECORDED, Compared, cell_runs, compared_pairs, not_recorded

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
    *IDENTITY_COLUMNS,
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


def read_kld(paths: Sequence[str | Path]) -> dict[str, dict[str, Any]]:
    """The KL divergence files (`fidelity/<model>__<quant>.json`) by weights key."""
    out = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        out[f"{data['model']}__{data['quant']}"] = data
    return out


def number(value: Any) -> float | None:
    """A figure as a float; None for a missing one, a bool or NaN."""
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
        **identity_columns(cell),
        "prompts_compared": shown.prompts_compared if shown else None,
        "unpaired": shown.unpaired if shown else None,
        "identical_pct": shown.identical_pct if shown else None,
        "identical_lo_pct": lo,
        "identical_hi_pct": hi,
        "floor_identical_pct": floor.identical_pct if floor and floor.recorded else None,
        "first_divergence_median": quartiles[1],
        "first_divergence_q1": quartiles[0],
        "first_divergence_q3": quartiles[2],
        "verdict": NOT_RECORDED if not_recorded(item) else item.verdict,
        "verdict_reason": "the workload keeps no outputs" if not_recorded(item) else item.reason,
        "decode_tok_s": number(metrics.get("decode_tok_s")),
    }
    if item.pair.kind == FLOOR:
        row["verdict"] = row["verdict_reason"] = ""
    kld = kld if item.pair.kind == QUANT else None
    if kld_problem(kld):
        row["kld_note"] = kld_problem(kld)
    elif kld is not None:
        row.update({key: number(kld.get(key)) for key in KLD_COLUMNS})
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
        kld_mean=number(kld.get("kld_mean")),
        kld_mean_err=number(kld.get("kld_mean_err")),
        kld_p99=number(kld.get("kld_p99")),
        same_top_pct=number(kld.get("same_top_pct")),
        same_top_err_pct=number(kld.get("same_top_pct_err")),
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
    value, err = number(row.get(key)), number(row.get(f"{key}_err"))
    if value is None:
        return ""
    return f"{value:.{digits}f}" + (f" ± {err:.{digits}f}" if err is not None else "") + unit


def _prompts_text(row: Mapping[str, Any]) -> str:
    """`24`, or `21 (3 not paired)` where some prompts were sent as other texts."""
    compared, unpaired = row["prompts_compared"], number(row.get("unpaired"))
    if compared is None or pd.isna(compared):
        return ""
    return f"{compared:g}" + (f" ({unpaired:g} not paired)" if unpaired else "")


def fidelity_view(table: pd.DataFrame) -> pd.DataFrame:
    """fidelity.md's columns, as text: the id parts that differ from the reference, the share
    identical with its interval, the floor, the first divergence, the verdict, the KL figures
    at their own precision (a q8_0's KL mean is about 0.003) and the goal's verdict."""
    rows = []
    for row in table.to_dict("records"):
        identical = number(row["identical_pct"])
        lo, hi = number(row["identical_lo_pct"]), number(row["identical_hi_pct"])
        floor = number(row["floor_identical_pct"])
        first = number(row["first_divergence_median"])
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
                "p (Holm)": p_text(number(row.get("p_value")), number(row.get("p_adjusted"))),
                "series (pooled)": verdict_text(
                    row["series_verdict"] if isinstance(row["series_verdict"], str) else None,
                    number(row.get("series_p_value")),
                ),
                "KL mean": _figure(row, "kld_mean", 4) or (row.get("kld_note") or ""),
                "KL p99": _figure(row, "kld_p99", 4),
                "same top %": _figure(row, "same_top_pct", 2),
                "PPL": _figure(row, "perplexity", 3),
                "goal": row.get("goal_verdict") or "",
            }
        )
    return pd.DataFrame(rows)
