"""Summary figures as pure functions of the tables (summary, spec gain) and per-request records;
`save_figure` writes PNG (for the report) and SVG beside it, atomically. Per-cell figures live in
plots_cell.py."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from ..vocabulary import Status

BASE_COLOR = "#4c72b0"
DRAFTER_COLOR = "#dd8452"
REFERENCE_COLOR = "#8c8c8c"
GROUP_GAP = 1.6
LOG_SCALE_SPREAD = 20  # a latency axis turns logarithmic when max/min exceeds this


def save_figure(fig, path: str | Path, svg: bool = True) -> None:
    """Write PNG, and SVG beside it unless `svg` is false, atomically (temp file, then rename).
    A cell's card draws PNG only: two SVG files per cell would add a twentieth to planning a
    large sweep (docs/measured.md, "Planning a large sweep"), for figures the summary has as SVG."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        for target in (path, path.with_suffix(".svg")) if svg else (path,):
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=target.suffix, prefix=".plot-")
            os.close(fd)
            try:
                fig.savefig(tmp, dpi=110, bbox_inches="tight", format=target.suffix[1:])
                os.chmod(tmp, 0o644)
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    finally:
        plt.close(fig)


def message_figure(title: str, message: str):
    """A figure that says why there is nothing to plot, so every output exists and reads well."""
    fig, ax = plt.subplots(figsize=(7, 2.2))
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.45, message, ha="center", va="center", wrap=True, fontsize=10)
    return fig


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _cell_label(row) -> str:
    drafter = "no drafter" if row.drafter == "none" else f"drafter {row.drafter}"
    return f"{row.quant} · {drafter} · {row.workload} (c={row.concurrency})"


def _grouped_positions(frame: pd.DataFrame) -> tuple[list[float], list[tuple[str, float]]]:
    """Bar positions with a gap between (model, engine) groups, and each group's title row."""
    positions, titles, y = [], [], 0.0
    for (model, engine), group in frame.groupby(["model", "engine"], sort=False):
        titles.append((f"{model} · {engine}", y))
        y += 0.9
        for _ in range(len(group)):
            positions.append(y)
            y += 1.0
        y += GROUP_GAP - 1.0
    return positions, titles


def _error_bars(frame: pd.DataFrame, values: Sequence[float]) -> list[list[float]] | None:
    """The 95 % interval of decode tok/s as (below, above) bar lengths; None without any."""
    if "decode_tok_s_lo" not in frame or frame["decode_tok_s_lo"].map(_missing).all():
        return None
    below, above = [], []
    for value, lo, hi in zip(
        values, frame["decode_tok_s_lo"], frame["decode_tok_s_hi"], strict=True
    ):
        missing = _missing(lo) or _missing(hi) or not value
        below.append(0.0 if missing else max(value - float(lo), 0.0))
        above.append(0.0 if missing else max(float(hi) - value, 0.0))
    return [below, above]


def decode_throughput_figure(summary: pd.DataFrame):
    """Decode tok/s per cell, grouped by model and engine; unfinished cells say their status."""
    if summary.empty:
        return message_figure("Decode throughput per cell", "the matrix has no cells")
    frame = summary.assign(_with_drafter=summary["drafter"] != "none").sort_values(
        ["model", "engine", "quant", "_with_drafter", "drafter", "workload", "concurrency"],
        kind="stable",
    )
    positions, titles = _grouped_positions(frame)
    height = 0.5 * (positions[-1] + 2) + 1.2
    fig, ax = plt.subplots(figsize=(9, max(height, 2.5)))
    values = [
        float(v) if s == Status.DONE and not _missing(v) else 0.0
        for v, s in zip(frame["decode_tok_s"], frame["status"], strict=True)
    ]
    colors = [BASE_COLOR if d == "none" else DRAFTER_COLOR for d in frame["drafter"]]
    error = _error_bars(frame, values)
    ax.barh(positions, values, color=colors, height=0.8, xerr=error, capsize=2 if error else 0)
    ax.set_yticks(positions, [_cell_label(r) for r in frame.itertuples()], fontsize=8)
    top = max([v + (error[1][i] if error else 0.0) for i, v in enumerate(values)] + [1.0])
    for i, (y, value, row) in enumerate(zip(positions, values, frame.itertuples(), strict=True)):
        text = f" {value:.1f}" if row.status == Status.DONE else f" {row.status}"
        ax.text(value + (error[1][i] if error else 0.0), y, text, va="center", fontsize=8)
    for title, y in titles:
        ax.text(0, y, title, fontsize=9, fontweight="bold", va="center")
    ax.set_xlim(0, top * 1.18)
    ax.set_ylim(positions[-1] + 0.7, -0.6)
    ax.set_xlabel("decode throughput (completion tokens/s, all concurrent requests)")
    ax.set_title(
        "Decode tok/s per cell, grouped by model and engine\n"
        "blue: no drafter, orange: speculative decoding"
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def spec_gain_figure(spec_gain: pd.DataFrame):
    """Base vs drafter decode tok/s for each pair, with the gain in %."""
    if spec_gain.empty:
        return message_figure(
            "Speculative decoding: base vs drafter", "this matrix has no drafter cells"
        )
    labels = [
        f"{r.model} · {r.engine} · {r.quant}\n{r.drafter} vs none · {r.workload}"
        for r in spec_gain.itertuples()
    ]
    base = [0.0 if _missing(v) else float(v) for v in spec_gain["base_decode_tok_s"]]
    draft = [0.0 if _missing(v) else float(v) for v in spec_gain["drafter_decode_tok_s"]]
    y = list(range(len(labels)))
    fig, ax = plt.subplots(figsize=(9, 0.9 * len(labels) + 1.6))
    ax.barh([i - 0.2 for i in y], base, height=0.4, color=BASE_COLOR, label="base (no drafter)")
    ax.barh([i + 0.2 for i in y], draft, height=0.4, color=DRAFTER_COLOR, label="with drafter")
    for i, row in enumerate(spec_gain.itertuples()):
        gain = row.decode_gain_pct
        text = "gain n/a" if _missing(gain) else f"{gain:+.1f} %"
        lo, hi = getattr(row, "decode_gain_lo_pct", None), getattr(row, "decode_gain_hi_pct", None)
        if not _missing(gain) and not _missing(lo) and not _missing(hi):
            text += f" [{lo:+.1f}, {hi:+.1f}] {row.verdict}"
        if row.flags:
            text += f"  ({row.flags})"
        ax.text(max(base[i], draft[i]), i, "  " + text, va="center", fontsize=8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlim(0, max(base + draft + [1.0]) * 1.6)
    ax.invert_yaxis()
    ax.set_xlabel("decode throughput (completion tokens/s)")
    ax.set_title(
        "Speculative decoding: base vs drafter decode tok/s\n"
        "(gain in %, with its 95 % interval paired over prompts where records exist)"
    )
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def latency_boxes_figure(samples_by_cell: Mapping[str, Mapping[str, Sequence[float]]]):
    """TTFT and TPOT distributions of every cell side by side (box: quartiles, whiskers
    1.5 IQR); `samples_by_cell` maps a cell id to {"ttft_ms": [...], "tpot_ms": [...]}."""
    cells = [c for c, s in samples_by_cell.items() if s.get("ttft_ms")]
    if not cells:
        return message_figure("TTFT and TPOT per cell", "no cell completed a request")
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.45 * len(cells) + 2.2), sharey=True)
    for ax, key, label in (
        (axes[0], "ttft_ms", "time to first token (ms)"),
        (axes[1], "tpot_ms", "time per output token (ms)"),
    ):
        data = [list(samples_by_cell[c].get(key) or [math.nan]) for c in cells]
        ax.boxplot(data, orientation="horizontal", flierprops={"markersize": 3})
        values = [v for series in data for v in series if v > 0]
        wide = bool(values) and max(values) / min(values) > LOG_SCALE_SPREAD
        if wide:
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(label + (", log scale" if wide else ""))
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(1, len(cells) + 1), cells, fontsize=7)
    axes[0].invert_yaxis()
    fig.suptitle("TTFT and TPOT distributions per cell (completed, measured requests)")
    fig.tight_layout()
    return fig


def peak_memory_figure(summary: pd.DataFrame):
    """Peak memory per cell (GiB): the summary's `peak_mem_gib`, the MemAvailable drop less the
    load client's own RSS rise."""
    frame = summary[summary["peak_mem_gib"].map(lambda v: not _missing(v))]
    if frame.empty:
        return message_figure("Peak memory per cell", "no cell has memory samples")
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(frame) + 1.6))
    y = list(range(len(frame)))
    ax.barh(y, frame["peak_mem_gib"].astype(float), color=BASE_COLOR)
    labels = [
        r.cell + ("" if r.status == Status.DONE else f" [{r.status}]") for r in frame.itertuples()
    ]
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(
        "peak MemAvailable drop from the pre-launch baseline, less the load client's RSS rise "
        "(GiB, 2^30 bytes)"
    )
    ax.set_title("Peak memory per cell (load, warmup, benchmark and teardown)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def concurrency_series(
    summary: pd.DataFrame, sweep_points: Collection[str] = ()
) -> dict[str, pd.DataFrame]:
    """Cells that differ only in concurrency (on one kind of content, as
    labels.matrix_sweeps_concurrency), as series with at least two concurrencies; a sweep's
    points (`sweep_points`, their cell ids) are left to the sweep figures."""
    done = summary[
        (summary["status"] == Status.DONE)
        & summary["concurrency"].notna()
        & ~summary["cell"].isin(set(sweep_points))
    ]
    keys = ["model", "engine", "quant", "drafter", "content"]
    series = {}
    for key, group in done.groupby([k for k in keys if k in done], sort=False, dropna=False):
        if group["concurrency"].nunique() >= 2:  # named without a content the table lacks
            named = [str(part) for part in key if isinstance(part, str)]
            series[" · ".join(named)] = group.sort_values("concurrency")
    return series


def throughput_vs_concurrency_figure(summary: pd.DataFrame, sweep_points: Collection[str] = ()):
    """Decode tok/s against concurrency, one line per model/engine/quant/drafter, of the cells
    that are no sweep's points."""
    series = concurrency_series(summary, sweep_points)
    if not series:
        return message_figure(
            "Decode throughput vs concurrency",
            "no finished cells at two or more concurrencies of the same configuration",
        )
    fig, ax = plt.subplots(figsize=(8, 4.5))
    concurrencies = set()
    for name, frame in series.items():
        ax.plot(frame["concurrency"], frame["decode_tok_s"], marker="o", label=name)
        concurrencies.update(int(c) for c in frame["concurrency"])
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(concurrencies), [str(c) for c in sorted(concurrencies)])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_xlabel("concurrency (concurrent requests, log2 scale)")
    ax.set_ylabel("decode throughput (completion tokens/s)")
    ax.set_title("Decode tok/s vs concurrency")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


REFERENCE_FIGURES = [
    ("decode_tok_s", "decode tok/s"),
    ("prefill_tok_s", "prefill tok/s"),
]


def measured_vs_reference_figure(summary: pd.DataFrame):
    """Measured beside published figures for each cell with a reference, one panel per
    figure that has any reference value."""

    def has_reference(key: str) -> pd.Series:
        column = f"ref_{key}"
        if column not in summary:
            return pd.Series(False, index=summary.index)
        return summary[column].map(lambda v: not _missing(v) and not isinstance(v, str))

    panels = [(key, label) for key, label in REFERENCE_FIGURES if has_reference(key).any()]
    if not panels:
        return message_figure("Measured vs published", "no cell has published reference figures")
    any_reference = pd.concat([has_reference(key) for key, _ in panels], axis=1).any(axis=1)
    frame = summary[any_reference]
    y = list(range(len(frame)))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5 * len(panels) + 3, 0.7 * len(frame) + 2.2), sharey=True
    )
    axes = [axes] if len(panels) == 1 else list(axes)
    for ax, (key, label) in zip(axes, panels, strict=True):
        measured = [
            0.0 if _missing(v) or s != Status.DONE else float(v)
            for v, s in zip(frame[key], frame["status"], strict=True)
        ]
        published = [0.0 if _missing(v) else float(v) for v in frame[f"ref_{key}"]]
        ax.barh([i - 0.2 for i in y], measured, height=0.4, color=BASE_COLOR, label="measured")
        ax.barh(
            [i + 0.2 for i in y],
            published,
            height=0.4,
            color=REFERENCE_COLOR,
            hatch="//",
            label="published reference",
        )
        for i, (value, status) in enumerate(zip(measured, frame["status"], strict=True)):
            text = f" {value:.1f}" if status == Status.DONE else f" {status}"
            ax.text(value, i - 0.2, text, va="center", fontsize=8)
            if published[i]:
                ax.text(published[i], i + 0.2, f" {published[i]:.1f}", va="center", fontsize=8)
        ax.set_xlim(0, max(measured + published + [1.0]) * 1.25)
        ax.set_xlabel(f"{label} (tokens/s)")
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, frame["cell"], fontsize=8)
    axes[0].invert_yaxis()
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("Measured vs published reference figures")
    fig.tight_layout()
    return fig
