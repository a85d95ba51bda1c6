"""The speed-fidelity figure: per model, decode tok/s against fidelity loss for the reference
quant and each quant compared with it, the frontier drawn, the answer ringed. A pure function
of `frontier.frontier_points`; saved by outputs/plots.save_figure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..plots import BASE_COLOR, message_figure  # noqa: E402

FRONTIER_COLOR = "#222222"
MEASURE_LABELS = {
    "kld_mean": "mean KL divergence from the reference (nats)",
    "not_identical_pct": "greedy outputs not identical to the reference's (%)",
}
TITLE = "Speed against fidelity"


def fidelity_figure(points: Sequence[Mapping[str, Any]]):
    """One panel per model; one line per engine and workload (its frontier as a step)."""
    if not points:
        return message_figure(TITLE, "no quant was compared with its model's reference quant")
    models = list(dict.fromkeys(p["model"] for p in points))
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        mine = [p for p in points if p["model"] == model]
        groups = list(dict.fromkeys((p["engine"], p["workload"]) for p in mine))
        for engine, workload in groups:
            group = [p for p in mine if (p["engine"], p["workload"]) == (engine, workload)]
            ax.scatter(
                [p["loss"] for p in group],
                [p["decode_tok_s"] for p in group],
                color=BASE_COLOR,
                zorder=3,
                label=f"{engine} · {workload}" if len(groups) > 1 else None,
            )
            for p in group:
                ax.annotate(
                    p["quant"],
                    (p["loss"], p["decode_tok_s"]),
                    textcoords="offset points",
                    xytext=(5, 4),
                    fontsize=8,
                )
                if p["answer"]:
                    ax.scatter(
                        [p["loss"]],
                        [p["decode_tok_s"]],
                        s=180,
                        facecolors="none",
                        edgecolors="#c44e52",
                        linewidths=1.5,
                        zorder=4,
                    )
            front = sorted((p for p in group if p["frontier"]), key=lambda p: p["loss"])
            ax.step(
                [p["loss"] for p in front],
                [p["decode_tok_s"] for p in front],
                where="post",
                color=FRONTIER_COLOR,
                linewidth=1,
            )
        ax.set_title(model)
        ax.set_xlabel(MEASURE_LABELS[mine[0]["measure"]])
        ax.set_ylabel("decode tok/s")
        ax.grid(alpha=0.3)
        if len(groups) > 1:
            ax.legend(fontsize=8)
    fig.suptitle(f"{TITLE} (line: the frontier; ring: the fastest within the goal)", fontsize=10)
    fig.tight_layout()
    return fig
