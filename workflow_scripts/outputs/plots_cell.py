"""Per-cell figures, pure functions of the cell's raw records: TTFT/TPOT distributions from
requests.jsonl's table and memory over time, phases shaded, from memory.csv."""

from __future__ import annotations

import csv
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..loadgen.request_table import RequestTable
from ..vocabulary import Status
from .plots import message_figure, plt

KIB_PER_GIB = 2**20
PHASE_COLORS = {
    "baseline": "#dddddd",
    "load": "#f4d27a",
    "warmup": "#b8d8a8",
    "bench": "#a8c8e8",
    "teardown": "#e8b8b8",
}


def read_memory(path: str | Path) -> list[dict[str, Any]]:
    """memory.csv rows with numbers parsed; empty fields are None."""
    if not Path(path).exists():
        return []
    rows = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            rows.append(
                {
                    "t": float(row["t"]),
                    "phase": row["phase"],
                    **{
                        key: float(row[key]) if row.get(key) not in (None, "") else None
                        for key in ("mem_available_kib", "server_rss_kib", "gpu_used_mib")
                    },
                }
            )
    return rows


def latency_samples_ms(requests: RequestTable) -> dict[str, list[float]]:
    """TTFT and TPOT (ms) of measured, completed requests, sorted."""
    done = requests.done
    return {
        "ttft_ms": sorted(r.ttft_s * 1000 for r in done if r.ttft_s is not None),
        "tpot_ms": sorted(r.tpot_s * 1000 for r in done if r.tpot_s is not None),
    }


def _cdf(ax, values: Sequence[float], xlabel: str, title: str) -> None:
    if not values:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    else:
        fractions = [(i + 1) / len(values) for i in range(len(values))]
        ax.step(values, fractions, where="post", color="#4c72b0")
        median = statistics.median(values)
        ax.axvline(median, color="#dd8452", linestyle="--", label=f"median {median:.1f} ms")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)


def latency_figure(requests: RequestTable, cell: str, status: str = Status.DONE):
    """CDFs of TTFT and TPOT over one cell's completed requests."""
    samples = latency_samples_ms(requests)
    if not samples["ttft_ms"]:
        return message_figure(f"TTFT and TPOT: {cell}", f"no completed requests (status: {status})")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    _cdf(left, samples["ttft_ms"], "time to first token (ms)", f"TTFT, n={len(samples['ttft_ms'])}")
    _cdf(
        right,
        samples["tpot_ms"],
        "time per output token (ms)",
        f"TPOT, n={len(samples['tpot_ms'])}",
    )
    fig.suptitle(f"Latency distributions (CDF): {cell}", fontsize=11)
    fig.tight_layout()
    return fig


def phase_spans(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, float, float]]:
    """Contiguous (phase, start_s, end_s) runs of the samples, each ending where the next
    begins."""
    spans: list[tuple[str, float, float]] = []
    for row in rows:
        if spans and spans[-1][0] == row["phase"]:
            spans[-1] = (row["phase"], spans[-1][1], row["t"])
        else:
            if spans:
                spans[-1] = (spans[-1][0], spans[-1][1], row["t"])
            spans.append((row["phase"], row["t"], row["t"]))
    return spans


def baseline_kib(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Median MemAvailable of the pre-launch samples: the same baseline as metrics.json."""
    base = [r["mem_available_kib"] for r in rows if r["phase"] == "baseline"]
    base = [v for v in base if v is not None]
    return statistics.median(base) if base else None


def memory_figure(rows: Sequence[Mapping[str, Any]], cell: str, status: str = Status.DONE):
    """MemAvailable drop from the pre-launch baseline, server RSS and GPU memory over time (GiB),
    with the run's phases shaded."""
    base = baseline_kib(rows)
    if not rows or base is None:
        return message_figure(f"Memory over time: {cell}", f"no memory samples (status: {status})")
    times = [r["t"] for r in rows]
    fig, ax = plt.subplots(figsize=(10, 4))
    for phase, start, end in phase_spans(rows):
        ax.axvspan(
            start, max(end, start + 1e-3), color=PHASE_COLORS.get(phase, "#eeeeee"), alpha=0.6, lw=0
        )
    drop = [
        (base - r["mem_available_kib"]) / KIB_PER_GIB
        if r["mem_available_kib"] is not None
        else None
        for r in rows
    ]
    ax.plot(times, drop, color="#222222", label="MemAvailable drop from baseline")
    rss = [r["server_rss_kib"] / KIB_PER_GIB if r["server_rss_kib"] else None for r in rows]
    if any(v is not None for v in rss):
        ax.plot(times, rss, color="#4c72b0", label="server RSS (process tree)")
    gpu = [r["gpu_used_mib"] / 1024 if r["gpu_used_mib"] is not None else None for r in rows]
    if any(v is not None for v in gpu):
        ax.plot(times, gpu, color="#c44e52", label="GPU memory used")
    handles, labels = ax.get_legend_handles_labels()
    seen = []
    for phase, _, _ in phase_spans(rows):
        if phase not in seen:
            seen.append(phase)
            handles.append(plt.Rectangle((0, 0), 1, 1, color=PHASE_COLORS.get(phase, "#eeeeee")))
            labels.append(f"phase: {phase}")
    ax.legend(handles, labels, fontsize=7, loc="upper left", ncol=2)
    ax.set_xlabel("time since the first sample (s)")
    ax.set_ylabel("memory (GiB, 2^30 bytes)")
    ax.set_title(
        f"Memory over time: {cell}\n(baseline MemAvailable {base / KIB_PER_GIB:.2f} GiB)",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
