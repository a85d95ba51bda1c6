"""Conversations by turn (results/summary/by_turn.*): one row per turn index of each cell that
replayed whole conversations, with the TTFT and TPOT of that turn's requests and what the
engine's prefix cache served them. A later turn carries the conversation so far: with the
cache on, its TTFT pays only for the new turn; with it off, for the whole history."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ..vocabulary import IDENTITY_COLUMNS, Status
from .compact import median_of

# A turn's row begins with its cell's, as summary.csv names it.
BY_TURN_CELL_COLUMNS = ["cell", *IDENTITY_COLUMNS, "prefix_cache"]
BY_TURN_COLUMNS = [
    *BY_TURN_CELL_COLUMNS,
    "turn",
    "requests",
    "ttft_median_ms",
    "ttft_p90_ms",
    "tpot_median_ms",
    "prefix_cache_hit_pct",
]
BY_TURN_TITLE = "Conversations: TTFT and the prefix cache by turn"
BY_TURN_INTRO = (
    "One row per turn index of each cell that replayed whole conversations (a ShareGPT "
    "workload with `conversations: true`): every request of turn k carries the conversation's "
    "first k human turns and the answers between them (the dataset's own; with `history: "
    "model`, the model's). TTFT and TPOT are of that "
    "turn's completed requests; `prefix_cache_hit_pct` is the share of their prompt tokens the "
    "engine served from its prefix cache (empty where its responses do not say: vLLM and "
    "SGLang count the whole run only, in summary.csv); `prefix_cache` is on or off by the "
    "engine's settings."
)


def by_turn_table(all_metrics: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """by_turn.csv: each done cell's metrics.json `by_turn`, a row per turn, in config order."""
    rows = []
    for m in all_metrics:
        if m.get("status") != Status.DONE or not m.get("by_turn"):
            continue
        for turn in m["by_turn"]:
            rows.append(
                {
                    **{key: m.get(key) for key in BY_TURN_CELL_COLUMNS},
                    "turn": turn["turn"],
                    "requests": turn["requests"],
                    "ttft_median_ms": median_of(turn, "ttft_ms"),
                    "ttft_p90_ms": (turn.get("ttft_ms") or {}).get("p90"),
                    "tpot_median_ms": median_of(turn, "tpot_ms"),
                    "prefix_cache_hit_pct": turn.get("prefix_cache_hit_pct"),
                }
            )
    return pd.DataFrame(rows, columns=BY_TURN_COLUMNS)
