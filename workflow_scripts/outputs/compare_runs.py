"""Two result sets (e.g. before and after an engine upgrade) -> every cell present in both, the
relative change of decode tok/s and the TTFT/TPOT medians with a 95 % interval and a verdict.
Paired over the prompts both runs completed when both have requests.jsonl; from repeats when
both ran a cell ≥ 3 times; unpaired when the prompts cannot be paired (another dataset file).

    python -m workflow_scripts.compare results-before results-after [--out table.md]
        [--figure change.png] [--fail-above 5]    # 5: exit 1 when a cell is significantly
                                                  # worse by more than 5 %

Exit codes: 0 compared; 1 a regression beyond --fail-above; 2 a usage error (e.g. a folder
with no cells/); 3 a result folder is damaged (a cell's metrics.json or requests.jsonl does
not parse, or its figures contradict its own requests): the table leaves those cells out and
stderr names each file. A regression found among the readable cells still exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..atomic import write_text
from ..loadgen.records import RequestRecord
from ..vocabulary import Status
from .cell_pairs import same_prompts
from .changes import (
    NO_INTERVAL,
    PAIRED_PROMPTS,
    REPEATS_T,
    SLOWER,
    UNPAIRED,
    Change,
)
from .changes import cell_changes as changes_between
from .record_index import INVALID_RESULT, load_cell
from .repeats import collapse_repeats
from .stats import HIGHER_IS_BETTER
from .writers import to_markdown

FIGURES = ("decode_tok_s", "ttft_median_ms", "tpot_median_ms")
SHORT = {"decode_tok_s": "decode", "ttft_median_ms": "ttft", "tpot_median_ms": "tpot"}
REGRESSED = 1
DAMAGED = 3  # not 1: a damaged folder is not a regression (argparse's usage errors are 2)
EXIT_CODES = (
    f"exit codes: 0 compared; {REGRESSED} a regression beyond --fail-above; 2 a usage error; "
    f"{DAMAGED} a damaged result folder (its cells left out, each file named on stderr)"
)
# The basis column, as it read before unpaired comparisons existed.
BASIS = {
    REPEATS_T: "repeats",
    PAIRED_PROMPTS: "paired",
    UNPAIRED: "unpaired bootstrap",
}


def read_results(results_dir: str | Path) -> tuple[dict[str, dict], dict[str, list]]:
    """Every cell's metrics.json (repeats folded into their cell) and request records, read
    by the tables' own reader (`writers.load_cell`): a damaged cell is a failed one with the
    reason, never compared."""
    metrics, records = [], {}
    for path in sorted(Path(results_dir).glob("cells/*/metrics.json")):
        cell_metrics, cell_records = load_cell(path, path.with_name("requests.jsonl"))
        metrics.append(cell_metrics)
        if path.with_name("requests.jsonl").exists():
            records[path.parent.name] = cell_records
    folded, _, folded_records = collapse_repeats(metrics, None, records)
    return {m["cell"]: m for m in folded}, folded_records


def damaged(results: tuple[Mapping[str, dict], Mapping[str, list]]) -> list[str]:
    """The reasons of the cells `read_results` found damaged (each names its file)."""
    return [
        m["reason"]
        for m in results[0].values()
        if str(m.get("reason") or "").startswith(INVALID_RESULT)
    ]


def _figures_of(metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    return (metrics.get("repeats") or {}).get("figures") or []


def _value(metrics: Mapping[str, Any], figure: str) -> float | None:
    if figure == "decode_tok_s":
        return metrics.get("decode_tok_s")
    key = figure.replace("_median_ms", "_ms")
    return (metrics.get(key) or {}).get("median")


def cell_changes(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    records_a: Sequence[RequestRecord] | None,
    records_b: Sequence[RequestRecord] | None,
) -> tuple[dict[str, Change], str]:
    """B against A for one cell, and what the interval rests on."""
    found = changes_between(
        _figures_of(a), _figures_of(b), records_a, records_b, FIGURES, same_prompts(a, b)
    )
    if found.method == NO_INTERVAL:
        changes = {}
        for figure in FIGURES:
            va, vb = _value(a, figure), _value(b, figure)
            pct = 100 * (vb / va - 1) if va and vb is not None else None
            changes[figure] = Change(figure, pct, None, None, None, 0, "none")
        return changes, "no records: no interval"
    return found.changes, f"{BASIS[found.method]}, {found.basis}"


def compare_table(
    results_a: tuple[Mapping[str, dict], Mapping[str, list]],
    results_b: tuple[Mapping[str, dict], Mapping[str, list]],
) -> pd.DataFrame:
    """One row per cell done in both result sets, in A's order."""
    (metrics_a, records_a), (metrics_b, records_b) = results_a, results_b
    rows = []
    for cell, a in metrics_a.items():
        b = metrics_b.get(cell)
        if b is None or not a.get("status") == b.get("status") == Status.DONE:
            continue
        changes, basis = cell_changes(a, b, records_a.get(cell), records_b.get(cell))
        row: dict[str, Any] = {"cell": cell}
        for figure in FIGURES:
            change, short = changes[figure], SHORT[figure]
            row[f"a_{figure}"] = _value(a, figure)
            row[f"b_{figure}"] = _value(b, figure)
            row[f"{short}_change_pct"] = change.change_pct
            row[f"{short}_lo_pct"] = change.lo_pct
            row[f"{short}_hi_pct"] = change.hi_pct
            row[f"{short}_verdict"] = change.verdict
        row["basis"] = basis
        rows.append(row)
    columns = ["cell"]
    for figure in FIGURES:
        short = SHORT[figure]
        columns += [f"a_{figure}", f"b_{figure}", f"{short}_change_pct", f"{short}_lo_pct"]
        columns += [f"{short}_hi_pct", f"{short}_verdict"]
    return pd.DataFrame(rows, columns=[*columns, "basis"])


def regressions(table: pd.DataFrame, threshold_pct: float) -> list[str]:
    """`cell: figure -x %` for each figure significantly worse by more than the threshold."""
    out = []
    for row in table.to_dict("records"):
        for figure in FIGURES:
            short = SHORT[figure]
            change = row[f"{short}_change_pct"]
            if row[f"{short}_verdict"] != SLOWER or change is None or pd.isna(change):
                continue
            worse = -change if HIGHER_IS_BETTER[figure] else change
            if worse > threshold_pct:
                out.append(f"{row['cell']}: {figure} {change:+.1f} %")
    return out


def change_figure(table: pd.DataFrame):
    """Decode tok/s change of B against A per cell with its 95 % interval (a forest plot);
    green faster, red slower, grey no detectable difference."""
    from .plots import message_figure, plt

    title = "Decode tok/s: B against A"
    if table.empty:
        return message_figure(title, "no cell finished in both result sets")
    colors = {"faster": "#55a868", "slower": "#c44e52"}
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(table) + 1.6))
    for y, row in enumerate(table.to_dict("records")):
        change, lo, hi = row["decode_change_pct"], row["decode_lo_pct"], row["decode_hi_pct"]
        if change is None or pd.isna(change):
            continue
        color = colors.get(row["decode_verdict"], "#8c8c8c")
        if not (pd.isna(lo) or pd.isna(hi)):
            ax.plot([lo, hi], [y, y], color=color, linewidth=2)
        ax.plot([change], [y], "o", color=color)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(table)), table["cell"], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("change of decode tok/s in % of A, with its 95 % interval")
    ax.set_title(title + " (green faster, red slower, grey no detectable difference)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def unmatched(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    notes = [f"only in A: {cell}" for cell in a if cell not in b]
    return notes + [f"only in B: {cell}" for cell in b if cell not in a]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workflow_scripts.compare",
        description=__doc__.splitlines()[0],
        epilog=EXIT_CODES,
    )
    parser.add_argument("results_a", help="results directory A (the reference, e.g. before)")
    parser.add_argument("results_b", help="results directory B (compared with A)")
    parser.add_argument("--out", help="write the table here (.csv: CSV, else markdown)")
    parser.add_argument("--format", choices=("md", "csv"), help="stdout format (default md)")
    parser.add_argument("--figure", help="also draw the decode change per cell (PNG + SVG)")
    parser.add_argument(
        "--fail-above",
        type=float,
        metavar="PCT",
        help="exit 1 when any cell is significantly worse (verdict slower) by more than PCT %%",
    )
    args = parser.parse_args(argv)
    for folder in (args.results_a, args.results_b):
        if not Path(folder, "cells").is_dir():
            parser.error(f"{folder}: no cells/ folder (expected a results directory)")
    a, b = read_results(args.results_a), read_results(args.results_b)
    broken = damaged(a) + damaged(b)
    table = compare_table(a, b)
    notes = unmatched(a[0], b[0])
    intro = (
        f"B = `{args.results_b}` against A = `{args.results_a}`: change in % of A with its 95 % "
        "interval; verdict `faster` / `slower` when the interval excludes no change."
    )
    if notes:
        intro += "\n\n" + "\n".join(f"- {note}" for note in notes)
    markdown = to_markdown(table, "Comparison of two result sets", intro)
    text = table.to_csv(index=False) if args.format == "csv" else markdown
    if args.out:
        write_text(args.out, table.to_csv(index=False) if args.out.endswith(".csv") else markdown)
        print(f"comparison written to {args.out}", file=sys.stderr)
    else:
        print(text, end="")
    if args.figure:
        from .plots import save_figure

        save_figure(change_figure(table), args.figure)
    if args.fail_above is not None:
        worse = regressions(table, args.fail_above)
        if worse:
            print(f"regressions beyond {args.fail_above} %:", *worse, sep="\n  ", file=sys.stderr)
            return REGRESSED
    if broken:
        print("damaged results, left out of the comparison:", *broken, sep="\n  ", file=sys.stderr)
        return DAMAGED
    return 0


if __name__ == "__main__":
    sys.exit(main())
