"""Engine against engine and quant against quant (results/summary/comparisons.*): every pair of
finished cells of one model, workload and drafter that differ in engine, quant or both, with
the change of decode tok/s and the TTFT / TPOT medians, its 95 % interval and a verdict.

The intervals come from workflow_scripts.outputs.changes (the same paired tests over prompts and
repeat t-interval as the spec gain). vLLM serves bf16 safetensors where llama.cpp serves GGUF quants
of the same model, so an engine pair at one quant name is rare: pairs that change both are kept and
say so in their `axis`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..atomic import write_text
from ..loadgen.records import OK, RequestRecord, pair_requests
from ..process.machine_use import disturbed_flag
from ..vocabulary import Cell, Status
from .changes import NO_INTERVAL, PAIRED_PROMPTS, UNPAIRED, cell_changes
from .compact import is_missing
from .record_index import read_index
from .repeats import collapse_repeats, repeat_figures
from .report_html import write_tables_html
from .tables import merge_with_cells
from .writers import load_indexed, to_markdown

QUANT, ENGINE, ENGINE_QUANT = "quant", "engine", "engine+quant"
PREFIX_CACHE = "prefix cache"  # two engine entries that differ in nothing but the cache
# The figures the spec gain and `compare_runs` give intervals for; lower latency is faster.
FIGURES = ("decode_tok_s", "ttft_median_ms", "tpot_median_ms")
FIGURE_LABELS = {
    "decode_tok_s": "decode tok/s",
    "ttft_median_ms": "TTFT median ms",
    "tpot_median_ms": "TPOT median ms",
}
# Must match for two cells to be a comparison; engine and quant are what may differ.
SAME = ("model", "workload", "drafter")
COLUMNS = [
    "axis",
    "model",
    "workload",
    "drafter",
    "a_cell",
    "b_cell",
    "a_engine",
    "a_quant",
    "b_engine",
    "b_quant",
    "figure",
    "a_value",
    "b_value",
    "change_pct",
    "change_lo_pct",
    "change_hi_pct",
    "interval_method",
    "interval_basis",
    "verdict",
    "flags",
    "disturbed",  # either cell: other work on the machine during its bench (flags says which)
]
TITLE = "Comparisons: engine against engine, quant against quant"
INTRO = (
    "Each pair of finished cells of one model, workload and drafter that differ in engine "
    "(`engine`), quant (`quant`) or both (`engine+quant`: e.g. vLLM at bf16 against llama.cpp "
    "at q8_0, two things changed at once). A is the cell that comes first in the config; change "
    "is B against A in % of A, with its 95 % interval. Verdict: `faster` or `slower` when the "
    "interval excludes no change (lower TTFT and TPOT are faster), else `no detectable "
    "difference`. Method: a t-interval over repeats when both cells ran ≥ 3 times (it holds "
    "start-to-start variance); else paired over the prompts both completed (a randomization "
    "test for decode tok/s, a paired bootstrap for the medians, as for the spec gain); an "
    "unpaired bootstrap over each run's requests only when the prompts cannot be paired. "
    "Flags `disturbed: A` / `B`: other work on the machine crossed the config's `checks` during "
    "that cell's bench; its verdict may be the machine's, not the engine's. Axis `prefix "
    "cache`: two engine entries that differ only in their prefix-cache settings (one on, one "
    "off), so the change is what the cache bought (TTFT above all, on prompts that share a "
    "prefix: conversations, shared prefixes, traces)."
)


@dataclass(frozen=True)
class Pair:
    """Two finished cells a reader compares; `a` comes first in the config."""

    axis: str
    a: Mapping[str, Any]
    b: Mapping[str, Any]


def _repeat_runs(metrics: Mapping[str, Any]) -> int:
    return (metrics.get("repeats") or {}).get("runs", 1)


def cache_only(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """The two cells' engines differ in nothing but the prefix cache: one setup digest
    (metrics.json `engine_setup_sha256`), one cache on and the other off."""
    setup = a.get("engine_setup_sha256")
    return (
        bool(setup)
        and setup == b.get("engine_setup_sha256")
        and ({a.get("prefix_cache"), b.get("prefix_cache")} == {"on", "off"})
    )


def pair_axis(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """What separates two cells, or None when they are no comparison: another model, workload
    or drafter, another repeat structure, or neither engine nor quant differs."""
    if any(a.get(key) != b.get(key) for key in SAME) or _repeat_runs(a) != _repeat_runs(b):
        return None
    engine, quant = a.get("engine") != b.get("engine"), a.get("quant") != b.get("quant")
    if engine and not quant and cache_only(a, b):
        return PREFIX_CACHE
    if engine:
        return ENGINE_QUANT if quant else ENGINE
    return QUANT if quant else None


def comparison_pairs(all_metrics: Sequence[Mapping[str, Any]]) -> list[Pair]:
    """Every pair of done cells with an axis, in config order (`all_metrics` in that order)."""
    done = [m for m in all_metrics if m.get("status") == Status.DONE]
    return [
        Pair(axis, a, b)
        for i, a in enumerate(done)
        for b in done[i + 1 :]
        if (axis := pair_axis(a, b)) is not None
    ]


def same_prompts(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Prompt index k names the same prompt in both runs: one dataset file (a workload's
    prompts are the dataset's in file order, or one seeded shuffle of them)."""
    sha_a, sha_b = a.get("dataset_sha256"), b.get("dataset_sha256")
    return not (sha_a and sha_b and sha_a != sha_b)


def _completed(records: Sequence[RequestRecord]) -> set[tuple[int, int]]:
    """Completed measured prompts (and conversation turns: pair keys)."""
    return {r.pair_key for r in records if r.status == OK and not r.warmup}


def pair_flags(
    pair: Pair,
    method: str,
    records_a: Sequence[RequestRecord] | None,
    records_b: Sequence[RequestRecord] | None,
) -> list[str]:
    """What a reader must know to trust the row: prompts not paired or not all shared, prompts
    the two servers tokenized differently (another tokenizer or chat template), an interval
    from one repeat of cells whose values are the repeats' mean, and a cell other work
    disturbed."""
    flags = []
    if disturbed := disturbed_flag({"A": pair.a, "B": pair.b}):
        flags.append(disturbed)
    if method == UNPAIRED:
        flags.append(
            "prompts not paired (another dataset, or < 2 completed by both as the same text)"
        )
    if method == PAIRED_PROMPTS:
        done_a, done_b = _completed(records_a or []), _completed(records_b or [])
        pairing = pair_requests(records_a or [], records_b or [])
        shared = len(pairing.pairs)
        if done_a != done_b:
            flags.append(
                f"different prompts completed ({len(done_a)} and {len(done_b)}): change on "
                f"the {shared} both completed"
            )
        if pairing.unpaired:
            flags.append(
                f"{pairing.unpaired} prompts not paired: both completed them, sent as other texts"
            )
        differ = sum(a.prompt_tokens != b.prompt_tokens for a, b in pairing.pairs)
        if differ:
            flags.append(f"prompt tokens differ on {differ} of {shared} prompts")
    repeated = max((m.get("repeats") or {}).get("done", 1) for m in (pair.a, pair.b))
    if method in (PAIRED_PROMPTS, UNPAIRED) and repeated > 1:
        flags.append("change and interval from each cell's first finished repeat")
    return flags


def pair_rows(
    pair: Pair,
    records_a: Sequence[RequestRecord] | None,
    records_b: Sequence[RequestRecord] | None,
) -> list[dict[str, Any]]:
    """One row per figure for one pair; without records or repeats, the change without an
    interval."""
    a, b = pair.a, pair.b
    found = cell_changes(
        (a.get("repeats") or {}).get("figures") or [],
        (b.get("repeats") or {}).get("figures") or [],
        records_a,
        records_b,
        FIGURES,
        same_prompts=same_prompts(a, b),
    )
    values_a, values_b = repeat_figures(a), repeat_figures(b)
    flags = "; ".join(pair_flags(pair, found.method, records_a, records_b))
    shaky = bool(disturbed_flag({"A": a, "B": b}))
    rows = []
    for figure in FIGURES:
        change = found.changes[figure]
        value_a, value_b = values_a[figure], values_b[figure]
        change_pct = change.change_pct
        if found.method == NO_INTERVAL and not is_missing(value_a) and value_a:
            change_pct = None if is_missing(value_b) else 100 * (value_b / value_a - 1)
        rows.append(
            {
                "axis": pair.axis,
                **{key: a.get(key) for key in SAME},
                "a_cell": a["cell"],
                "b_cell": b["cell"],
                "a_engine": a.get("engine"),
                "a_quant": a.get("quant"),
                "b_engine": b.get("engine"),
                "b_quant": b.get("quant"),
                "figure": figure,
                "a_value": value_a,
                "b_value": value_b,
                "change_pct": change_pct,
                "change_lo_pct": change.lo_pct,
                "change_hi_pct": change.hi_pct,
                "interval_method": found.method,
                "interval_basis": found.basis,
                "verdict": change.verdict,
                "flags": flags,
                "disturbed": shaky,
            }
        )
    return rows


def comparisons_table(
    all_metrics: Sequence[Mapping[str, Any]],
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
) -> pd.DataFrame:
    """comparisons.csv: a cell's repeats already folded into it (repeats.collapse_repeats),
    `all_metrics` in config order, `records` by cell id."""
    records = records or {}
    rows = [
        row
        for pair in comparison_pairs(all_metrics)
        for row in pair_rows(pair, records.get(pair.a["cell"]), records.get(pair.b["cell"]))
    ]
    return pd.DataFrame(rows, columns=COLUMNS)


def _signed(value: Any) -> str:
    return "" if is_missing(value) else f"{value:+.1f}"


def compact_view(table: pd.DataFrame) -> pd.DataFrame:
    """comparisons.md and its HTML twin: the cells as `engine · quant` (model, workload and
    drafter have their own columns), the interval as `[lo, hi]` in %."""
    rows = []
    for row in table.to_dict("records"):
        interval = ""
        if not (is_missing(row["change_lo_pct"]) or is_missing(row["change_hi_pct"])):
            interval = f"[{_signed(row['change_lo_pct'])}, {_signed(row['change_hi_pct'])}]"
        method = row["interval_method"]
        if row["interval_basis"]:
            method += f", {row['interval_basis']}"
        rows.append(
            {
                "axis": row["axis"],
                "model": row["model"],
                "workload": row["workload"],
                "drafter": row["drafter"],
                "A": f"{row['a_engine']} · {row['a_quant']}",
                "B": f"{row['b_engine']} · {row['b_quant']}",
                "figure": FIGURE_LABELS[row["figure"]],
                "A value": row["a_value"],
                "B value": row["b_value"],
                "change %": _signed(row["change_pct"]),
                "95 % interval %": interval,
                "method": method,
                "verdict": row["verdict"],
                "flags": row["flags"],
            }
        )
    columns = ["axis", "model", "workload", "drafter", "A", "B", "figure", "A value", "B value"]
    columns += ["change %", "95 % interval %", "method", "verdict", "flags"]
    return pd.DataFrame(rows, columns=columns)


def write_comparisons(table: pd.DataFrame, out: Mapping[str, Any]) -> None:
    """comparisons.csv (every column), .md and .html (the compact view) at `out`'s paths."""
    write_text(out["comparisons_csv"], table.to_csv(index=False))
    view = compact_view(table)
    write_text(out["comparisons_md"], to_markdown(view, TITLE, INTRO))
    write_tables_html(out["comparisons_html"], "Comparisons", [(TITLE, view, INTRO)])


def indexed_comparisons(records_index: str | Path, cells: Sequence[Cell]) -> pd.DataFrame:
    """The comparisons of the indexed cells (`cells`: the config's), a cell's repeats made
    one."""
    all_metrics, records = load_indexed(read_index(records_index))
    all_metrics, cells, records = collapse_repeats(all_metrics, cells, records)
    return comparisons_table(merge_with_cells(all_metrics, cells), records)
