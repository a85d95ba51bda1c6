"""Per-cell metrics.json -> summary tables (every cell, failed and blocked too), the seeds' index
view, the speculative-decoding gain table and published reference figures beside the measured
ones. Pure functions of the records, then thin writers; `python -m workflow_scripts.aggregate
--configfile X --reference-only --out DIR` lists a config's published figures without running
anything."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..atomic import write_text
from ..cell.machine_use import client_note, interference_note
from ..config.matrix import load_cells, repeat_of
from ..loadgen.metrics import common_prompt_subset, compute_metrics
from ..loadgen.records import OK, RequestRecord
from ..vocabulary import CellMetrics, ConfigError, Status
from .compact import (
    NOT_RUN,
    REF_PREFIX,
    compact_view,
    completed_text,
    first_line,
    is_missing,
    median_of,
    number_text,
    summary_row,
)
from .repeats import collapse_repeats
from .report_html import overview_fragment, write_tables_html
from .stats import (
    MIN_REPEATS,
    as_columns,
    bootstrap_intervals,
    interval_from_repeats,
    paired_changes,
    repeat_changes,
    stability,
)

COUNT_COLUMNS = ["concurrency", "num_prompts", "completed", "errors", "incomplete"]
SUMMARY_COLUMNS = [
    "cell",
    "model",
    "engine",
    "quant",
    "drafter",
    "workload",
    "concurrency",
    "num_prompts",
    "status",
    "completed",
    "errors",
    "incomplete",
    "prefill_tok_s",
    "decode_tok_s",
    "req_per_s",
    "ttft_median_ms",
    "tpot_median_ms",
    "itl_median_ms",
    "e2el_median_ms",
    "peak_mem_gib",
    "acceptance_rate",
    "acceptance_length",
    "hit_time_cap",
    "duration_s",
    "synthetic",
    "reason",
]
# Added after the `ref_*` columns, so every earlier column keeps its place in summary.csv.
# Each headline figure's 95 % interval (workflow_scripts.outputs.stats) follows as
# `<figure>_lo/_hi`.
INTERVAL_FIGURES = [
    "decode_tok_s",
    "prefill_tok_s",
    "req_per_s",
    "ttft_median_ms",
    "ttft_p99_ms",
    "tpot_median_ms",
    "tpot_p99_ms",
    "e2el_median_ms",
    "peak_mem_gib",
    "acceptance_rate",
    "acceptance_length",
]
LATER_COLUMNS = [
    "build_variant",
    "interval_source",
    "interval_n",
    "ttft_p99_ms",
    "tpot_p99_ms",
    *[f"{name}_{end}" for name in INTERVAL_FIGURES for end in ("lo", "hi")],
    "repeats",
    "stability_first_tok_s",
    "stability_last_tok_s",
    "unstable",
    "client_processes",
    "client_cpu_percent_of_core",
    "client_max_process_percent_of_core",
    "client_limited",
    "other_cpu_percent_of_core",
    "other_mem_rise_gib",
    "interference",
]
# Published figures sit in their own `ref_*` columns, named after the measured column they match.
REFERENCE_KEYS = [
    "decode_tok_s",
    "prefill_tok_s",
    "ttft_median_ms",
    "tpot_median_ms",
    "peak_mem_gib",
    "completed",
    "note",
]
INDEX_COLUMNS = [
    "Configuration",
    "Engine (+speculative)",
    "Quant",
    "Ctx",
    "Conc",
    "Decode tok/s",
    "Status",
    "Completed",
]
INDEX_REFERENCE_COLUMN = "Decode tok/s (published)"
# Engine settings that set the server's context, by the names the adapters use.
CONTEXT_SETTING_KEYS = ("ctx_size", "max_model_len", "context_length")


def identity_from_cell(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A metrics-shaped stub for a cell with no measurement (reference-only, or not run yet)."""
    workload = cell.get("workload_spec") or {}
    return {
        "cell": cell["id"],
        "model": cell["model"],
        "engine": cell["engine"],
        "quant": cell["quant"],
        "drafter": cell["drafter"],
        "workload": cell["workload"],
        "concurrency": workload.get("concurrency"),
        "num_prompts": workload.get("num_prompts"),
        "status": Status.BLOCKED if cell.get("blocked") else NOT_RUN,
        "reason": cell.get("blocked") or "",
        "synthetic": (cell.get("weights") or {}).get("source") == "synthetic",
    }


def reference_columns(references: Sequence[Mapping[str, Any]]) -> list[str]:
    """The fixed `ref_*` columns, then any other published key a config attached, sorted."""
    extra = sorted({k for ref in references for k in ref} - set(REFERENCE_KEYS))
    return [REF_PREFIX + k for k in [*REFERENCE_KEYS, *extra]]


def _cells_by_id(cells: Sequence[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    return {cell["id"]: cell for cell in cells or []}


def merge_with_cells(
    all_metrics: Sequence[CellMetrics], cells: Sequence[Mapping[str, Any]] | None
) -> list[Mapping[str, Any]]:
    """Metrics of the config's cells in config order; a cell with none gets an identity stub."""
    by_cell = {m["cell"]: m for m in all_metrics}
    if not cells:
        return list(all_metrics)
    ordered = [by_cell.get(cell["id"]) or identity_from_cell(cell) for cell in cells]
    known = {cell["id"] for cell in cells}
    return ordered + [m for m in all_metrics if m["cell"] not in known]


def interval_columns(
    metrics: CellMetrics, records: Sequence[RequestRecord] | None
) -> dict[str, Any]:
    """A done cell's p99 figures and the 95 % interval of each headline figure: a t-interval
    from its repeats when ≥ 3 finished, else a bootstrap over its requests when it ran once
    (two repeats: none). Figures with no per-request basis (memory, acceptance) get an
    interval only from repeats."""
    if metrics.get("status") != Status.DONE:
        return {}
    row: dict[str, Any] = {
        "ttft_p99_ms": (metrics.get("ttft_ms") or {}).get("p99"),
        "tpot_p99_ms": (metrics.get("tpot_ms") or {}).get("p99"),
    }
    repeats = metrics.get("repeats")
    if repeats:
        row["repeats"] = repeats["done"]
    if repeats and repeats["done"] >= MIN_REPEATS:
        for name in INTERVAL_FIGURES:
            interval = interval_from_repeats([f.get(name) for f in repeats["figures"]])
            if interval is not None:
                row[f"{name}_lo"], row[f"{name}_hi"] = interval.lo, interval.hi
        row["interval_source"] = "repeats"
        row["interval_n"] = repeats["done"]
    elif records and not (repeats and repeats["done"] > 1):
        intervals = bootstrap_intervals(records)
        row.update(as_columns(intervals))
        row["interval_source"] = "bootstrap"
        row["interval_n"] = intervals["decode_tok_s"].n
    return {**row, **stability_columns(records)}


def stability_columns(records: Sequence[RequestRecord] | None) -> dict[str, Any]:
    """Decode tok/s of the first and last tenth of the requests, and whether they differ beyond
    their intervals (of the first finished repeat, with repeats); nothing under 20 requests."""
    found = stability(records) if records else None
    if found is None:
        return {}
    return {
        "stability_first_tok_s": found.first.value,
        "stability_last_tok_s": found.last.value,
        "unstable": found.flagged,
        "stability_note": found.note(),
    }


def check_columns(metrics: CellMetrics) -> dict[str, Any]:
    """The client's CPU use and what else used the machine during the bench (metrics.json's
    `client` and `interference`), each with its flag and, when flagged, a note."""
    client, other = metrics.get("client"), metrics.get("interference")
    row: dict[str, Any] = {}
    if client:
        row.update(
            {
                "client_processes": client.get("processes"),
                "client_cpu_percent_of_core": client.get("cpu_percent_of_core"),
                "client_max_process_percent_of_core": client.get("max_process_percent_of_core"),
                "client_limited": client.get("limited"),
                "client_note": client_note(client),
            }
        )
    if other:
        row.update(
            {
                "other_cpu_percent_of_core": other.get("other_cpu_percent_of_core"),
                "other_mem_rise_gib": other.get("other_mem_rise_gib"),
                "interference": other.get("flagged"),
                "interference_note": interference_note(other),
            }
        )
    return row


def summary_rows(
    all_metrics: Sequence[CellMetrics],
    cells: Sequence[Mapping[str, Any]] | None = None,
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
) -> list[dict[str, Any]]:
    """One row per cell; `cells` (Cell dicts) adds cells with no metrics and their references;
    the cells' request `records` add each figure's interval."""
    by_id = _cells_by_id(cells)
    records = records or {}
    return [
        {
            **summary_row(metrics, (by_id.get(metrics["cell"]) or {}).get("reference")),
            **interval_columns(metrics, records.get(metrics["cell"])),
            **check_columns(metrics),
        }
        for metrics in merge_with_cells(all_metrics, cells)
    ]


def summary_frame(
    rows: Sequence[Mapping[str, Any]], cells: Sequence[Mapping[str, Any]] | None = None
) -> pd.DataFrame:
    """Summary rows -> summary.csv's frame: the fixed columns, `ref_*`, then later additions."""
    references = [(cell.get("reference") or {}) for cell in cells or []]
    columns = SUMMARY_COLUMNS + reference_columns(references) + LATER_COLUMNS
    frame = pd.DataFrame(rows, columns=columns)
    # Counts stay integers when some cells (failed, blocked) have none.
    for column in [*COUNT_COLUMNS, "interval_n", "repeats", "client_processes"]:
        frame[column] = frame[column].astype("Int64")
    return frame


def summary_table(
    all_metrics: Sequence[CellMetrics],
    cells: Sequence[Mapping[str, Any]] | None = None,
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
) -> pd.DataFrame:
    """Every column of every cell: summary.csv."""
    return summary_frame(summary_rows(all_metrics, cells, records), cells)


def context_tokens(cell: Mapping[str, Any]) -> int | None:
    """The server's context length from the engine settings, else the model's window."""
    settings = (cell.get("engine_spec") or {}).get("settings") or {}
    for key in CONTEXT_SETTING_KEYS:
        if settings.get(key):
            return int(settings[key])
    window = (cell.get("model_info") or {}).get("context_window")
    return int(window) if window else None


def engine_label(cell: Mapping[str, Any]) -> str:
    """`engine + drafter (kind, n_max N)`: the seeds' "Engine (+speculative)"."""
    engine = cell["engine"]
    drafter = cell.get("drafter_spec")
    if not drafter or cell.get("drafter") in (None, "none"):
        return engine
    detail = drafter.get("kind", "")
    if drafter.get("model"):
        detail += f", draft model {drafter['model']}"
    if drafter.get("n_max"):
        detail += f", n_max {drafter['n_max']}"
    return f"{engine} + {cell['drafter']} ({detail})"


def status_text(status: str | None, reason: str | None) -> str:
    reason = first_line(reason, 160)
    return f"{status}: {reason}" if reason and status != Status.DONE else str(status)


def index_table(
    summary: pd.DataFrame,
    cells: Sequence[Mapping[str, Any]] | None = None,
    card_links: str | None = None,
) -> pd.DataFrame:
    """The seeds' index view. `card_links` is the path prefix from the table to the cells'
    directories (e.g. `../cells`): the Configuration column then links each card."""
    by_id = _cells_by_id(cells)
    with_reference = (
        REF_PREFIX + "decode_tok_s" in summary
        and summary[REF_PREFIX + "decode_tok_s"].map(lambda v: not is_missing(v)).any()
    )
    rows = []
    for row in summary.to_dict("records"):
        cell = by_id.get(row["cell"]) or {"engine": row["engine"], "drafter": row["drafter"]}
        name = row["cell"]
        entry = {
            "Configuration": f"[{name}]({card_links}/{name}/card.md)" if card_links else name,
            "Engine (+speculative)": engine_label({**cell, "engine": row["engine"]}),
            "Quant": row["quant"],
            "Ctx": context_tokens(cell) or "",
            "Conc": row["concurrency"],
            "Decode tok/s": (
                number_text(row["decode_tok_s"]) if row["status"] == Status.DONE else ""
            ),
            "Status": status_text(row["status"], row.get("reason")),
            "Completed": completed_text(row),
        }
        if with_reference:
            entry[INDEX_REFERENCE_COLUMN] = number_text(row.get(REF_PREFIX + "decode_tok_s"))
        rows.append(entry)
    columns = INDEX_COLUMNS + ([INDEX_REFERENCE_COLUMN] if with_reference else [])
    return pd.DataFrame(rows, columns=columns)


def blocked_text(cell: Mapping[str, Any]) -> str:
    return f"{Status.BLOCKED}: {first_line(cell['blocked'])}" if cell.get("blocked") else ""


def reference_table(cells: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The published figures of a config's cells, one row per cell that has any (or is
    blocked), in their own table: what a reference-only summary lists."""
    references = [c.get("reference") or {} for c in cells]
    used = {key for reference in references for key in reference}
    keys = [c[len(REF_PREFIX) :] for c in reference_columns(references)]
    keys = [key for key in keys if key in used]
    rows = []
    for cell, reference in zip(cells, references, strict=True):
        if not reference and not cell.get("blocked"):
            continue
        rows.append(
            {
                "cell": cell["id"],
                "engine (+speculative)": engine_label(cell),
                "quant": cell["quant"],
                "concurrency": (cell.get("workload_spec") or {}).get("concurrency"),
                "status": blocked_text(cell),
                **{key: reference.get(key) for key in keys},
            }
        )
    columns = ["cell", "engine (+speculative)", "quant", "concurrency", "status", *keys]
    return pd.DataFrame(rows, columns=columns)


def matrix_sweeps_concurrency(cells: Sequence[Mapping[str, Any]]) -> bool:
    """True when one model/engine/quant/drafter runs at two or more concurrencies."""
    seen: dict[tuple, set] = {}
    for cell in cells:
        key = (cell["model"], cell["engine"], cell["quant"], cell["drafter"])
        seen.setdefault(key, set()).add((cell.get("workload_spec") or {}).get("concurrency"))
    return any(len(values) >= 2 for values in seen.values())


def optional_summary_figures(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """Summary figures a matrix gets only when they can say something: throughput vs
    concurrency for a concurrency sweep, measured vs published when references exist."""
    names = []
    if matrix_sweeps_concurrency(cells):
        names.append("throughput_vs_concurrency")
    if any(cell.get("reference") for cell in cells):
        names.append("measured_vs_reference")
    return names


def _gain_pct(new: float | None, base: float | None) -> float | None:
    if is_missing(new) or is_missing(base) or base == 0:
        return None
    return 100.0 * (new - base) / base


SPEC_GAIN_COLUMNS = [
    "drafter_cell",
    "base_cell",
    "model",
    "engine",
    "quant",
    "drafter",
    "workload",
    "base_decode_tok_s",
    "drafter_decode_tok_s",
    "decode_gain_pct",
    "base_ttft_median_ms",
    "drafter_ttft_median_ms",
    "base_tpot_median_ms",
    "drafter_tpot_median_ms",
    "acceptance_rate",
    "acceptance_length",
    "drafter_itl_per_token_median_ms",
    "common_prompts",
    "base_decode_tok_s_common",
    "drafter_decode_tok_s_common",
    "decode_gain_pct_common",
    "base_tpot_median_ms_common",
    "drafter_tpot_median_ms_common",
    "flags",
    # appended: the gain's 95 % interval, paired over the prompts both cells completed
    "decode_gain_lo_pct",
    "decode_gain_hi_pct",
    "verdict",
    "gain_interval_source",
    "tpot_change_pct",
    "tpot_change_lo_pct",
    "tpot_change_hi_pct",
]


def completed_prompts(records: Sequence[RequestRecord]) -> set[int]:
    return {r.prompt_index for r in records if r.status == OK and not r.warmup}


def common_subset_figures(
    base_records: Sequence[RequestRecord], drafter_records: Sequence[RequestRecord]
) -> dict[str, Any]:
    """When the two cells completed different prompts (a cap, skipped or failed requests), the
    pair's figures again on the prompts both completed, from the raw records. Throughput there
    is the subset's tokens over the subset's own span, so it compares like with like but is not
    the cell's headline figure."""
    common = common_prompt_subset(base_records, drafter_records)
    if completed_prompts(base_records) == completed_prompts(drafter_records):
        return {}

    def on_common(records: Sequence[RequestRecord]) -> dict[str, Any]:
        return compute_metrics([r for r in records if r.prompt_index in common and not r.warmup])

    base, drafter = on_common(base_records), on_common(drafter_records)
    return {
        "common_prompts": len(common),
        "base_decode_tok_s_common": base["decode_tok_s"],
        "drafter_decode_tok_s_common": drafter["decode_tok_s"],
        "decode_gain_pct_common": _gain_pct(drafter["decode_tok_s"], base["decode_tok_s"]),
        "base_tpot_median_ms_common": base["tpot_ms"]["median"],
        "drafter_tpot_median_ms_common": drafter["tpot_ms"]["median"],
    }


def paired_gain_columns(
    base_records: Sequence[RequestRecord], drafter_records: Sequence[RequestRecord]
) -> dict[str, Any]:
    """The drafter's decode gain and TPOT change with 95 % intervals from a paired randomization
    test over the prompts both cells completed, and the verdict on decode tok/s."""
    changes = paired_changes(
        base_records, drafter_records, figures=("decode_tok_s", "tpot_median_ms")
    )
    decode, tpot = changes["decode_tok_s"], changes["tpot_median_ms"]
    return {
        "decode_gain_lo_pct": decode.lo_pct,
        "decode_gain_hi_pct": decode.hi_pct,
        "verdict": decode.verdict,
        "gain_interval_source": f"paired randomization, {decode.common_prompts} prompts",
        "tpot_change_pct": tpot.change_pct,
        "tpot_change_lo_pct": tpot.lo_pct,
        "tpot_change_hi_pct": tpot.hi_pct,
    }


def _repeated(metrics: CellMetrics) -> bool:
    return (metrics.get("repeats") or {}).get("done", 0) >= MIN_REPEATS


def repeat_gain_columns(base: CellMetrics, drafter: CellMetrics) -> dict[str, Any]:
    """Both cells repeated ≥ 3 times: the gain's interval from the repeats' figures (a
    t-interval on the difference of means), which includes start-to-start variance."""

    def values(metrics, name):
        return [f.get(name) for f in metrics["repeats"]["figures"]]

    decode = repeat_changes(
        values(base, "decode_tok_s"), values(drafter, "decode_tok_s"), "decode_tok_s"
    )
    tpot = repeat_changes(
        values(base, "tpot_median_ms"), values(drafter, "tpot_median_ms"), "tpot_median_ms"
    )
    return {
        "decode_gain_lo_pct": decode.lo_pct,
        "decode_gain_hi_pct": decode.hi_pct,
        "verdict": decode.verdict,
        "gain_interval_source": (
            f"repeats, {base['repeats']['done']} + {drafter['repeats']['done']} runs"
        ),
        "tpot_change_pct": tpot.change_pct,
        "tpot_change_lo_pct": tpot.lo_pct,
        "tpot_change_hi_pct": tpot.hi_pct,
    }


def spec_gain_table(
    all_metrics: Sequence[CellMetrics],
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
) -> pd.DataFrame:
    """Each drafter cell beside its base (same model, engine, quant, workload, drafter none).
    With the cells' request `records`, pairs that completed different prompts also get their
    figures on the common subset."""
    records = records or {}
    by_key = {
        (m.get("model"), m.get("engine"), m.get("quant"), m.get("workload")): m
        for m in all_metrics
        if m.get("drafter") == "none"
    }
    rows = []
    for m in all_metrics:
        if m.get("drafter") in (None, "none"):
            continue
        base = by_key.get((m.get("model"), m.get("engine"), m.get("quant"), m.get("workload")))
        spec = m.get("spec") or {}
        flags, common, paired = [], {}, {}
        if base is None:
            flags.append("no base cell")
        elif not base.get("status") == m.get("status") == Status.DONE:
            flags.append("a cell of the pair did not finish")
        else:
            if _weights_files(base) != _weights_files(m):
                flags.append("base and drafter cells used different weight files")
            if _repeated(base) and _repeated(m):
                paired = repeat_gain_columns(base, m)
            if base["cell"] in records and m["cell"] in records:
                common = common_subset_figures(records[base["cell"]], records[m["cell"]])
                paired = paired or paired_gain_columns(records[base["cell"]], records[m["cell"]])
                if common:
                    flags.append(
                        "different prompts completed: *_common columns compare the "
                        f"{common['common_prompts']} both completed"
                    )
            elif base.get("prompt_indices") != m.get("prompt_indices"):
                flags.append("different prompt sets")
        rows.append(
            {
                "drafter_cell": m["cell"],
                "base_cell": base["cell"] if base else None,
                "model": m.get("model"),
                "engine": m.get("engine"),
                "quant": m.get("quant"),
                "drafter": m.get("drafter"),
                "workload": m.get("workload"),
                "base_decode_tok_s": base.get("decode_tok_s") if base else None,
                "drafter_decode_tok_s": m.get("decode_tok_s"),
                "decode_gain_pct": _gain_pct(
                    m.get("decode_tok_s"), base.get("decode_tok_s") if base else None
                ),
                "base_ttft_median_ms": median_of(base, "ttft_ms") if base else None,
                "drafter_ttft_median_ms": median_of(m, "ttft_ms"),
                "base_tpot_median_ms": median_of(base, "tpot_ms") if base else None,
                "drafter_tpot_median_ms": median_of(m, "tpot_ms"),
                "acceptance_rate": spec.get("acceptance_rate"),
                "acceptance_length": spec.get("mean_acceptance_length"),
                # several tokens arrive per chunk when drafts are accepted: ITL per token
                "drafter_itl_per_token_median_ms": median_of(m, "itl_per_token_ms"),
                **common,
                "flags": "; ".join(flags),
                **paired,
            }
        )
    return pd.DataFrame(rows, columns=SPEC_GAIN_COLUMNS)


def _weights_files(metrics: CellMetrics) -> list[str]:
    return [f.get("sha256") for f in (metrics.get("weights") or {}).get("files", [])]


def _display(frame: pd.DataFrame) -> pd.DataFrame:
    shown = frame.copy().astype(object)
    for column in shown.columns:
        shown[column] = shown[column].map(lambda v: "" if is_missing(v) else number_text(v))
    return shown


def to_markdown(frame: pd.DataFrame, title: str, intro: str = "") -> str:
    # disable_numparse: tabulate would otherwise turn "120.00" back into 120
    body = (
        _display(frame).to_markdown(index=False, disable_numparse=True)
        if len(frame)
        else "_no rows_"
    )
    intro = f"{intro}\n\n" if intro else ""
    return f"# {title}\n\n{intro}{body}\n"


def write_table(
    frame: pd.DataFrame, csv_path: str | Path, md_path: str | Path, title: str, intro: str = ""
) -> None:
    write_text(csv_path, frame.to_csv(index=False))
    write_text(md_path, to_markdown(frame, title, intro))


def load_metrics(paths: Sequence[str | Path]) -> list[CellMetrics]:
    return [json.loads(Path(p).read_text()) for p in paths]


SUMMARY_INTRO = (
    "The columns a reader compares, one row per cell; summary.csv holds every column (errors, "
    "req/s, ITL and E2E latency, duration, build variant, each published figure as `ref_*`). "
    "(published): a figure attached to the cell in the config, never measured here. A cell that "
    "did not finish shows its reason, not its figures."
)


INTERVAL_INTRO = (
    "`value ± h`: h is the half-width of the figure's 95 % interval; the interval column says "
    "what it comes from: repeats of the cell (each with its own server start: what another run "
    "would give) or a bootstrap over one run's requests (which requests the run held; not "
    "run-to-run drift)."
)


# A row's flag notes and the heading the summary lists the flagged cells under.
FLAG_NOTES = [
    ("stability_note", "Throughput not steady within the run"),
    ("client_note", "The load client may have limited the measurement"),
    ("interference_note", "Other work on the machine during the bench"),
]


def summary_intro(
    all_metrics: Sequence[CellMetrics], rows: Sequence[Mapping[str, Any]] = ()
) -> str:
    """The summary's intro, plus a line per cell whose acceptance figures the time cap put out
    of step with the completed requests (their `spec.cap_note`), and for each flag of
    FLAG_NOTES a line per cell its row carries a note for (throughput drift, a busy client,
    other work on the machine)."""
    flagged = [
        f"- `{m['cell']}`: {(m.get('spec') or {})['cap_note']}"
        for m in all_metrics
        if (m.get("spec") or {}).get("cap_note")
    ]
    intro = SUMMARY_INTRO
    if any(r.get("interval_source") for r in rows):
        intro += " " + INTERVAL_INTRO
    if flagged:
        intro += "\n\nAcceptance figures to read with care:\n\n" + "\n".join(flagged)
    for key, heading in FLAG_NOTES:
        lines = [f"- `{r['cell']}`: {r[key]}" for r in rows if r.get(key)]
        if lines:
            intro += f"\n\n{heading}:\n\n" + "\n".join(lines)
    return intro


INDEX_INTRO = (
    "One line per cell. Decode tok/s counts completion tokens of all concurrent requests per "
    "second of the measured run; a column marked (published) holds a reference figure."
)


def write_tables(
    all_metrics: Sequence[CellMetrics],
    cells: Sequence[Mapping[str, Any]],
    out: Mapping[str, str | Path],
    card_links: str | None = "../cells",
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """summary.{csv,md}, index.{csv,md} and spec_gain.{csv,md} to the paths named in `out`;
    index.md links each cell's card through `card_links` (None: no cards to link).
    summary.csv holds every column, summary.md the compact view; a cell's repeats make one
    row. Returns the summary, compact and spec-gain tables."""
    all_metrics, cells, records = collapse_repeats(all_metrics, cells, records)
    rows = summary_rows(all_metrics, cells, records)  # one bootstrap per cell, for both views
    summary = summary_frame(rows, cells)
    headers, compact_rows = compact_view(rows)
    compact = pd.DataFrame(compact_rows, columns=headers)
    write_text(out["summary_csv"], summary.to_csv(index=False))
    compact.attrs["intro"] = summary_intro(all_metrics, rows)  # the HTML twin says the same
    write_text(
        out["summary_md"], to_markdown(compact, "Summary: one row per cell", compact.attrs["intro"])
    )
    write_text(out["index_csv"], index_table(summary, cells).to_csv(index=False))
    intro = INDEX_INTRO + (" Configuration links each cell's result card." if card_links else "")
    write_text(
        out["index_md"],
        to_markdown(index_table(summary, cells, card_links=card_links), "Index", intro),
    )
    spec_gain = spec_gain_table(merge_with_cells(all_metrics, cells), records)
    write_table(
        spec_gain,
        out["spec_gain_csv"],
        out["spec_gain_md"],
        "Speculative decoding: each drafter cell beside its base",
    )
    return summary, compact, spec_gain


def load_records(paths: Sequence[str | Path]) -> dict[str, list[RequestRecord]]:
    """Each cell's request records, keyed by cell id (the folder name)."""
    out = {}
    for path in map(Path, paths):
        lines = path.read_text().splitlines()
        out[path.parent.name] = [RequestRecord.from_dict(json.loads(x)) for x in lines if x]
    return out


def aggregate_from_snakemake(sm) -> None:
    cells = json.loads(sm.params.cells)
    all_metrics = load_metrics(sm.input.metrics)
    records = load_records(sm.input.requests)
    summary, compact, spec_gain = write_tables(all_metrics, cells, sm.output, records=records)
    _, cells, _ = collapse_repeats(all_metrics, cells)  # the index: one line per cell
    write_tables_html(
        sm.output.summary_html,
        "Summary",
        [
            ("Index: one line per cell", index_table(summary, cells), INDEX_INTRO),
            ("The columns a reader compares", compact, compact.attrs["intro"]),
        ],
    )
    write_tables_html(
        sm.output.spec_gain_html,
        "Speculative decoding",
        [
            (
                "Each drafter cell beside its base",
                spec_gain,
                "",
            )
        ],
    )


FIGURE_TITLES = {
    "decode_tok_s": "Decode tok/s per cell",
    "latency": "TTFT and TPOT per cell",
    "peak_memory": "Peak memory per cell",
    "spec_gain": "Speculative decoding: base vs drafter",
    "throughput_vs_concurrency": "Decode tok/s vs concurrency",
    "measured_vs_reference": "Measured vs published reference",
}


def _figure_builders():
    from . import plots  # matplotlib: only the figure rules pay its import

    return {
        "decode_plot": lambda d: plots.decode_throughput_figure(d["summary"]),
        "latency_plot": lambda d: plots.latency_boxes_figure(d["latency_samples"]()),
        "memory_plot": lambda d: plots.peak_memory_figure(d["summary"]),
        "spec_gain_plot": lambda d: plots.spec_gain_figure(d["spec_gain"]),
        "concurrency_plot": lambda d: plots.throughput_vs_concurrency_figure(d["summary"]),
        "reference_plot": lambda d: plots.measured_vs_reference_figure(d["summary"]),
    }


def pooled_repeats(samples: Mapping[str, Mapping[str, list[float]]]) -> dict[str, dict]:
    """Per-cell latency samples with a cell's repeats pooled under the cell's id: one box per
    cell, as one row per cell in the tables."""
    out: dict[str, dict[str, list[float]]] = {}
    for cell, values in samples.items():
        pooled = out.setdefault(repeat_of(cell)[0], {key: [] for key in values})
        for key, items in values.items():
            pooled.setdefault(key, []).extend(items)
    return {cell: {k: sorted(v) for k, v in values.items()} for cell, values in out.items()}


def figures_from_snakemake(sm) -> None:
    """Draw every summary figure the rule names among its outputs (PNG + SVG)."""
    from .plots import save_figure
    from .plots_cell import latency_samples_ms, read_requests

    requests = sm.input.get("requests") or []  # figures of metrics alone take none
    all_metrics, cells, records = collapse_repeats(
        load_metrics(sm.input.metrics),
        json.loads(sm.params.cells),
        load_records([requests] if isinstance(requests, str) else requests),
    )
    all_metrics = merge_with_cells(all_metrics, cells)
    data = {
        "summary": summary_table(all_metrics, cells, records),
        "spec_gain": spec_gain_table(all_metrics, records),
        "latency_samples": lambda: pooled_repeats(
            {Path(path).parent.name: latency_samples_ms(read_requests(path)) for path in requests}
        ),
    }
    for key, build in _figure_builders().items():
        path = sm.output.get(key)  # the rule's named outputs say which figures it draws
        if path is not None:
            save_figure(build(data), path)


def overview_from_snakemake(sm) -> None:
    """The report's front page: the index table and every summary figure, embedded."""
    index = pd.read_csv(sm.input.index, dtype=str, keep_default_na=False)
    figures = [
        (FIGURE_TITLES.get(Path(path).stem, Path(path).stem), path) for path in sm.input.figures
    ]
    write_text(sm.output.overview, overview_fragment(index, figures, [INDEX_INTRO]))


def reference_only(configfile: str | Path, out_dir: str | Path) -> pd.DataFrame:
    """Tables of a config's cells and their published figures; nothing is run or read from
    results. Writes summary, index and reference tables (csv + md) into `out_dir`."""
    cells = [cell.to_dict() for cell in load_cells(configfile)]
    out = Path(out_dir)
    write_tables(
        [],
        cells,
        {
            **{
                f"{n}_{ext}": out / f"{n}.{ext}"
                for n in ("summary", "index")
                for ext in ("csv", "md")
            },
            "spec_gain_csv": out / "spec_gain.csv",
            "spec_gain_md": out / "spec_gain.md",
        },
        card_links=None,
    )
    table = reference_table(cells)
    write_table(
        table,
        out / "reference.csv",
        out / "reference.md",
        f"Published reference figures: {Path(configfile).name}",
        "Figures published for these cells (attached as `reference:` in the config); "
        "nothing was measured here.",
    )
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workflow_scripts.aggregate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--configfile", required=True, help="a matrix config (YAML)")
    parser.add_argument(
        "--reference-only",
        action="store_true",
        help="list the cells and their published figures without any measured results",
    )
    parser.add_argument("--out", required=True, help="directory for the tables")
    args = parser.parse_args(argv)
    if not args.reference_only:
        parser.error("only --reference-only is available here; `snakemake` builds the rest")

    try:
        table = reference_only(args.configfile, args.out)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    print(to_markdown(table, "Published reference figures"))
    print(f"tables written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
