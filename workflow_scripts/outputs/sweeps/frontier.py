"""pareto.csv: the frontier of throughput against interactivity over every finished point of
every series, and which series owns each stretch of it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import accumulate

import pandas as pd

from ...vocabulary import Status
from ..compact import is_missing
from .points import POINT_COLUMNS

PARETO_COLUMNS = [
    *POINT_COLUMNS,
    "interactivity_tok_s",
    "decode_tok_s",
    "stretch",
    "disturbed",  # the frontier point rests on a disturbed measurement
]


def pareto_frontier(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the non-dominated (x, y): no other point has ≥ both and > one. Two points
    at the same place are both on it. O(n log n): by x falling, a point is on the frontier when
    its y is the highest of its x and above every y of a larger x."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    on, best, i = [], -math.inf, 0
    while i < len(order):
        x = points[order[i]][0]
        group = []
        while i < len(order) and points[order[i]][0] == x:
            group.append(order[i])
            i += 1
        top = points[group[0]][1]  # the group is sorted by y falling
        if top > best:
            on += [j for j in group if points[j][1] == top]
            best = top
    return sorted(on)


def pareto_table(sweeps: pd.DataFrame) -> pd.DataFrame:
    """pareto.csv: the frontier of decode tok/s (throughput) against interactivity over every
    finished point of every series, by interactivity rising (so throughput falling); `stretch`
    numbers the runs of consecutive frontier points one series owns; `disturbed` marks a
    frontier point measured while other work used the machine."""
    done = sweeps[
        (sweeps["status"] == Status.DONE)
        & sweeps["decode_tok_s"].map(lambda v: not is_missing(v))
        & sweeps["interactivity_tok_s"].map(lambda v: not is_missing(v))
    ]
    xy = list(
        zip(
            done["interactivity_tok_s"].astype(float),
            done["decode_tok_s"].astype(float),
            strict=True,
        )
    )
    frontier = done.iloc[pareto_frontier(xy)]
    frontier = frontier.sort_values(
        ["interactivity_tok_s", "decode_tok_s", "series"],
        ascending=[True, False, True],
        kind="stable",
    )
    frame = frontier[PARETO_COLUMNS[:-2]].reset_index(drop=True).copy()
    owners = list(frame["series"])
    changes = [0] + [int(a != b) for a, b in zip(owners, owners[1:], strict=False)]
    frame["stretch"] = pd.array([1 + c for c in accumulate(changes)][: len(owners)], dtype="Int64")
    frame["disturbed"] = list(frontier["disturbed"])
    frame["concurrency"] = frame["concurrency"].astype("Int64")
    return frame[PARETO_COLUMNS]


def frontier_stretches(pareto: pd.DataFrame) -> pd.DataFrame:
    """Which series owns each stretch of the frontier, from which point to which."""
    rows = []
    for stretch, group in pareto.groupby("stretch", sort=True):
        rows.append(
            {
                "stretch": stretch,
                "series": group["series"].iloc[0],
                "points": ", ".join(group["point"]),
                "interactivity_from_tok_s": group["interactivity_tok_s"].iloc[0],
                "interactivity_to_tok_s": group["interactivity_tok_s"].iloc[-1],
                "decode_from_tok_s": group["decode_tok_s"].iloc[0],
                "decode_to_tok_s": group["decode_tok_s"].iloc[-1],
            }
        )
    columns = ["stretch", "series", "points", "interactivity_from_tok_s"]
    columns += ["interactivity_to_tok_s", "decode_from_tok_s", "decode_to_tok_s"]
    return pd.DataFrame(rows, columns=columns)
