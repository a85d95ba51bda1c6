"""The latency-goal figure (`summary/slo_search.png`): each series' probes against load, one
panel per objective, drawn from each series' search outcome (`outcome`); matplotlib, imported
only when a figure is drawn."""

from __future__ import annotations

from typing import Any

from ...slo.search import ProbeKey
from .outcome import SearchOutcome


def search_points(search: SearchOutcome) -> list[dict[str, Any]]:
    """One row per measured probe (the walk's last extension at each load, and any probe off the
    walk): what the figure draws."""
    walked = {step.key for step in search.plan.steps}
    last: dict[Any, ProbeKey] = {}
    for key in sorted(search.results, key=lambda k: (k[0], k[1])):
        last[key[0]] = key
    rows = []
    for load, key in sorted(last.items()):
        result = search.results[key]
        for objective in result.objectives:
            rows.append(
                {
                    "series": search.series,
                    "load": load,
                    "figure": objective.objective.label,
                    "limit": objective.objective.max_ms,
                    "value": objective.bound.value,
                    "lo": objective.bound.lo,
                    "hi": objective.bound.hi,
                    "verdict": str(result.verdict),
                    "walked": key in walked,
                }
            )
    return rows


VERDICT_MARKERS = {
    "pass": ("o", "#2a9d3f"),
    "fail": ("x", "#c0392b"),
    "unresolved": ("s", "#999999"),
}


def search_figure(searches: list[SearchOutcome]):
    """Each series' probes against load, one panel per objective: the measured percentile with
    its confidence interval, marked by verdict, and the objective's limit as a line."""
    from ..plots import message_figure, plt  # matplotlib: only when a figure is drawn

    rows = [row for search in searches for row in search_points(search)]
    if not rows:
        return message_figure("Latency goals", "no probe measured yet")
    figures = list(dict.fromkeys(row["figure"] for row in rows))
    fig, axes = plt.subplots(1, len(figures), figsize=(6.5 * len(figures), 4.2), squeeze=False)
    for ax, name in zip(axes[0], figures, strict=True):
        panel = [row for row in rows if row["figure"] == name]
        for index, series in enumerate(dict.fromkeys(row["series"] for row in panel)):
            points = sorted((r for r in panel if r["series"] == series), key=lambda r: r["load"])
            color = f"C{index}"
            ax.plot(
                [r["load"] for r in points],
                [r["value"] for r in points],
                color=color,
                alpha=0.6,
                label=series,
            )
            for r in points:
                marker, edge = VERDICT_MARKERS[r["verdict"]]
                if r["lo"] is not None or r["hi"] is not None:
                    lo = r["lo"] if r["lo"] is not None else r["value"]
                    hi = r["hi"] if r["hi"] is not None else r["value"]
                    ax.vlines(r["load"], lo, hi, color=color, alpha=0.4)
                ax.scatter([r["load"]], [r["value"]], marker=marker, color=edge, zorder=3, s=40)
        for limit in sorted({r["limit"] for r in panel}):
            ax.axhline(limit, color="black", linestyle="--", linewidth=1)
            ax.annotate(
                f"limit {limit:g} ms",
                (0.01, limit),
                xycoords=("axes fraction", "data"),
                va="bottom",
                fontsize=8,
            )
        ax.set_xscale("log", base=2)
        loads = sorted({r["load"] for r in panel})
        ax.set_xticks(loads, [f"{load:g}" for load in loads])
        ax.minorticks_off()
        ax.set_xlabel(searches[0].settings.over.replace("_", " "))
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{name}: o pass, x fail, ■ unresolved")
        ax.legend(fontsize=7)
    return fig
