"""A short card per series, in words, for sweeps.md and sweeps.html."""

from __future__ import annotations

import math

import pandas as pd

from ...loadgen.metrics import SEND_LAG_LIMIT_PCT
from ...vocabulary import Status
from ..compact import is_missing, number_text
from .frontier import frontier_stretches


def series_sections(
    sweeps: pd.DataFrame, pareto: pd.DataFrame, crossover: pd.DataFrame
) -> list[tuple[str, list[str]]]:
    """A short card per series: its points and how they ended, the server starts they ran on,
    where throughput and interactivity peak, the frontier stretches it owns, and (a drafter
    series) where the drafter stops paying and its outputs against its base's (each point as
    one of the series', and pooled over them)."""
    stretches = frontier_stretches(pareto)
    by_series = crossover.set_index("series")["summary"].to_dict() if len(crossover) else {}
    outputs = crossover.set_index("series")["outputs"].to_dict() if len(crossover) else {}
    out = []
    for series, group in sweeps.groupby("series", sort=False):
        done = group[group["status"] == Status.DONE]
        lines = [
            f"Points ({group['axis'].iloc[0]}): "
            + ", ".join(f"{p} {s}" for p, s in zip(group["point"], group["status"], strict=True))
        ]
        starts = [s for s in dict.fromkeys(group["server_start"]) if not is_missing(s)]
        if starts:
            lines.append(f"Server starts: {len(starts)} ({', '.join(map(str, starts))})")
        else:
            lines.append("Server starts: none recorded (a point on a server of its own has none)")
        for figure, label, unit in (
            ("decode_tok_s", "Highest decode throughput", "tok/s"),
            ("interactivity_tok_s", "Highest interactivity", "tok/s per user"),
        ):
            values = done[figure].map(lambda v: -math.inf if is_missing(v) else v)
            if len(values) and values.max() > -math.inf:
                best = done.loc[values.idxmax()]
                lines.append(f"{label}: {number_text(best[figure])} {unit} at {best['point']}")
        owned = stretches[stretches["series"] == series]
        if len(owned):
            lines.append(
                "On the frontier: "
                + "; ".join(f"stretch {r.stretch} ({r.points})" for r in owned.itertuples())
            )
        else:
            lines.append("On the frontier: no point")
        shaky = [p for p, d in zip(group["point"], group["disturbed"], strict=True) if d is True]
        if shaky:
            lines.append(
                f"Disturbed (other work on the machine during the bench): {', '.join(shaky)}"
            )
        late = [
            p for p, f in zip(group["point"], group["send_lag_flagged"], strict=True) if f is True
        ]
        if late:
            lines.append(
                f"Sent late (send lag past {SEND_LAG_LIMIT_PCT:g} % of TTFT; read TTFT from the "
                f"schedule): {', '.join(late)}"
            )
        failed = group[group["status"] != Status.DONE]
        for row in failed.itertuples():
            lines.append(f"{row.point}: {row.status}" + (f" ({row.reason})" if row.reason else ""))
        if series in by_series:
            lines.append(f"Speculative decoding against its base: {by_series[series]}")
        if not is_missing(outputs.get(series)) and outputs.get(series):
            lines.append(f"Its greedy outputs against its base's: {outputs[series]}")
        out.append((series, lines))
    return out
