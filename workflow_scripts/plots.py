"""Figures as pure functions of the summary table; PNG (and SVG beside it)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def _save(fig, path: str | Path) -> None:
    """Write PNG and SVG atomically (temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for target in (path, path.with_suffix(".svg")):
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=target.suffix, prefix=".plot-")
        os.close(fd)
        try:
            fig.savefig(tmp, dpi=120, bbox_inches="tight", format=target.suffix[1:])
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    plt.close(fig)


def plot_decode_throughput(summary: pd.DataFrame, path: str | Path) -> None:
    """Decode tok/s per cell, grouped by model and engine; cells that did not finish shown as 0
    with their status in the label."""
    frame = summary.sort_values(["model", "engine", "quant", "drafter", "workload"])
    labels = [
        f"{r.model} · {r.engine} · {r.quant}\n{r.drafter} · {r.workload}"
        + ("" if r.status == "done" else f" [{r.status}]")
        for r in frame.itertuples()
    ]
    values = frame["decode_tok_s"].fillna(0).astype(float).tolist()
    colors = ["#4c72b0" if d == "none" else "#dd8452" for d in frame["drafter"]]
    fig, ax = plt.subplots(figsize=(8, 0.55 * max(len(values), 2) + 1.2))
    bars = ax.barh(range(len(values)), values, color=colors)
    ax.set_yticks(range(len(values)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("decode throughput (tokens/s, all concurrent requests)")
    ax.set_title("Decode tok/s per cell (orange: with a drafter)")
    for bar, value in zip(bars, values, strict=False):
        ax.text(
            bar.get_width(),
            bar.get_y() + bar.get_height() / 2,
            f" {value:.1f}",
            va="center",
            fontsize=8,
        )
    ax.grid(axis="x", alpha=0.3)
    _save(fig, path)
