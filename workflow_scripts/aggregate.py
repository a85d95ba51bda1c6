"""Per-cell metrics.json -> summary tables (every cell, failed and blocked too) and the
speculative-decoding gain table. Pure functions of the records, then thin writers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from .atomic import write_text

SUMMARY_COLUMNS = [
    "cell",
    "model",
    "engine",
    "quant",
    "drafter",
    "workload",
    "concurrency",
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


def _median(metrics: dict[str, Any], key: str) -> float | None:
    value = metrics.get(key)
    return value.get("median") if isinstance(value, dict) else None


def summary_row(metrics: dict[str, Any]) -> dict[str, Any]:
    mem = metrics.get("mem") or {}
    spec = metrics.get("spec") or {}
    reason = metrics.get("reason") or ""
    return {
        "cell": metrics["cell"],
        "model": metrics.get("model"),
        "engine": metrics.get("engine"),
        "quant": metrics.get("quant"),
        "drafter": metrics.get("drafter"),
        "workload": metrics.get("workload"),
        "concurrency": metrics.get("concurrency"),
        "status": metrics.get("status"),
        "completed": metrics.get("completed"),
        "errors": metrics.get("errors"),
        "incomplete": metrics.get("incomplete"),
        "prefill_tok_s": metrics.get("prefill_tok_s"),
        "decode_tok_s": metrics.get("decode_tok_s"),
        "req_per_s": metrics.get("req_per_s"),
        "ttft_median_ms": _median(metrics, "ttft_ms"),
        "tpot_median_ms": _median(metrics, "tpot_ms"),
        "itl_median_ms": _median(metrics, "itl_ms"),
        "e2el_median_ms": _median(metrics, "e2el_ms"),
        "peak_mem_gib": mem.get("peak_delta_gib"),
        "acceptance_rate": spec.get("acceptance_rate"),
        "acceptance_length": spec.get("mean_acceptance_length"),
        "hit_time_cap": metrics.get("hit_time_cap"),
        "duration_s": metrics.get("duration_s"),
        "synthetic": bool(metrics.get("synthetic")),
        "reason": reason.splitlines()[0][:300] if reason else "",
    }


def summary_table(all_metrics: Sequence[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([summary_row(m) for m in all_metrics], columns=SUMMARY_COLUMNS)


def _gain_pct(new: float | None, base: float | None) -> float | None:
    if new is None or base in (None, 0) or pd.isna(new) or pd.isna(base):
        return None
    return 100.0 * (new - base) / base


def spec_gain_table(all_metrics: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Each drafter cell beside its base (same model, engine, quant, workload, drafter none)."""
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
        flags = []
        if base is None:
            flags.append("no base cell")
        elif _weights_files(base) != _weights_files(m):
            flags.append("base and drafter cells used different weight files")
        if base is not None and base.get("prompt_indices") != m.get("prompt_indices"):
            flags.append("different prompt sets")
        if base is not None and (base.get("status") != "done" or m.get("status") != "done"):
            flags.append("a cell of the pair did not finish")
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
                "base_ttft_median_ms": _median(base, "ttft_ms") if base else None,
                "drafter_ttft_median_ms": _median(m, "ttft_ms"),
                "base_tpot_median_ms": _median(base, "tpot_ms") if base else None,
                "drafter_tpot_median_ms": _median(m, "tpot_ms"),
                "acceptance_rate": spec.get("acceptance_rate"),
                "acceptance_length": spec.get("mean_acceptance_length"),
                "flags": "; ".join(flags),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
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
            "flags",
        ],
    )


def _weights_files(metrics: dict[str, Any]) -> list[str]:
    return [f.get("sha256") for f in (metrics.get("weights") or {}).get("files", [])]


def to_markdown(frame: pd.DataFrame, title: str) -> str:
    shown = frame.copy()
    for column in shown.columns:
        if shown[column].dtype.kind == "f":
            shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else f"{v:.2f}")
    body = shown.to_markdown(index=False) if len(shown) else "_no rows_"
    return f"# {title}\n\n{body}\n"


def write_table(frame: pd.DataFrame, csv_path: str | Path, md_path: str | Path, title: str) -> None:
    write_text(csv_path, frame.to_csv(index=False))
    write_text(md_path, to_markdown(frame, title))


def load_metrics(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    return [json.loads(Path(p).read_text()) for p in paths]


def aggregate_from_snakemake(sm) -> None:
    from .plots import plot_decode_throughput

    all_metrics = load_metrics(sm.input.metrics)
    write_table(
        summary_table(all_metrics),
        sm.output.summary_csv,
        sm.output.summary_md,
        "Summary: one row per cell",
    )
    write_table(
        spec_gain_table(all_metrics),
        sm.output.spec_gain_csv,
        sm.output.spec_gain_md,
        "Speculative decoding: each drafter cell beside its base",
    )
    plot_decode_throughput(summary_table(all_metrics), sm.output.decode_plot)
