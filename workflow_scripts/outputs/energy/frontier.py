"""summary/energy_frontier.csv and .md: the frontier of output tokens per joule against
interactivity over every sweep point whose energy was measured (the frontier InferenceX draws,
by the sweeps' one Pareto frontier: sweeps/frontier.py), by interactivity rising, and which
series owns each stretch; where no point was measured, no rows and the reason."""

from __future__ import annotations

from itertools import accumulate
from pathlib import Path

import pandas as pd

from ...atomic import write_text
from ...vocabulary import ENERGY_MEASURED, Status
from ..compact import is_missing
from ..sweeps.frontier import pareto_frontier
from ..writers import to_markdown
from .view import not_measured_lines

ENERGY_FRONTIER_COLUMNS = [
    "cell",
    "series",
    "axis",
    "concurrency",
    "request_rate",
    "point",
    "interactivity_tok_s",
    "output_tokens_per_j",
    "j_per_output_token",
    "usd_per_m_output_tokens",
    "stretch",
    "disturbed",  # the frontier point rests on a disturbed measurement
    "energy_note",  # what its joules cover
]
TITLE = "Output tokens per joule against interactivity: the frontier"
INTRO = (
    "The sweep points no other point beats on both output tokens per joule (gross: every joule "
    "the devices drew over the bench window, the idle draw included) and interactivity (1000 / "
    "TPOT median: the tokens per second one user sees), over every point whose energy was "
    "measured, by interactivity rising: what a token costs in energy at each speed a user can "
    "be served at. A stretch is a run of consecutive frontier points one series owns. A GPU's "
    "joules are its board energy, a lower bound on the machine's."
)


def measured_points(sweeps: pd.DataFrame) -> pd.DataFrame:
    keep = (sweeps["status"] == Status.DONE) & (sweeps["energy_status"] == ENERGY_MEASURED)
    for column in ("interactivity_tok_s", "output_tokens_per_j"):
        keep &= sweeps[column].map(lambda v: not is_missing(v))
    return sweeps[keep]


def energy_frontier_table(sweeps: pd.DataFrame) -> pd.DataFrame:
    """energy_frontier.csv from sweeps.csv's frame."""
    done = measured_points(sweeps)
    xy = list(
        zip(
            done["interactivity_tok_s"].astype(float),
            done["output_tokens_per_j"].astype(float),
            strict=True,
        )
    )
    frontier = done.iloc[pareto_frontier(xy)].sort_values(
        ["interactivity_tok_s", "output_tokens_per_j", "series"],
        ascending=[True, False, True],
        kind="stable",
    )
    owners = list(frontier["series"])
    changes = [0] + [int(a != b) for a, b in zip(owners, owners[1:], strict=False)]
    frame = frontier.reindex(columns=ENERGY_FRONTIER_COLUMNS).reset_index(drop=True)
    frame["stretch"] = pd.array([1 + c for c in accumulate(changes)][: len(owners)], dtype="Int64")
    frame["concurrency"] = frame["concurrency"].astype("Int64")
    return frame


def frontier_intro(sweeps: pd.DataFrame) -> str:
    """The intro, and where no point was measured, why."""
    rows = [
        {"cell": c, "energy_status": s, "energy_note": n}
        for c, s, n in zip(
            sweeps["cell"], sweeps["energy_status"], sweeps["energy_note"], strict=True
        )
    ]
    if measured_points(sweeps).empty:
        reasons = not_measured_lines(rows) or ["no sweep point's energy was measured"]
        return "No point to draw: " + "; ".join(reasons) + ".\n\n" + INTRO
    return INTRO


def write_energy_frontier(
    sweeps: pd.DataFrame, frontier: pd.DataFrame, csv: str | Path, md: str | Path
) -> None:
    write_text(csv, frontier.to_csv(index=False))
    write_text(
        md, to_markdown(frontier.drop(columns=["energy_note"]), TITLE, frontier_intro(sweeps))
    )
