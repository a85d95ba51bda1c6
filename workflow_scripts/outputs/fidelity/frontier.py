"""The speed-fidelity frontier (`summary/fidelity_frontier.csv` / `.md`) and its answer, the
fastest quant within the fidelity goal: per model, engine and workload, the reference quant
and each quant compared with it, decode tok/s against fidelity loss, the non-dominated ones
by the sweeps' one Pareto frontier (outputs.sweeps.frontier.pareto_frontier)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ...fidelity.pairs import QUANT
from ...process.machine_use import disturbed, disturbed_note
from ...vocabulary import Cell
from ..sweeps.frontier import pareto_frontier
from .table import number

FRONTIER_COLUMNS = [
    "model",
    "cell",
    "engine",
    "workload",
    "quant",
    "decode_tok_s",
    "measure",
    "loss",
    "goal_verdict",
    "answer",
    "disturbed",  # other work on the machine during the cell's bench (machine_use.disturbed)
]
FRONTIER_TITLE = "Speed against fidelity: the fastest quant within the goal"
FRONTIER_INTRO = (
    "Per model, engine and workload: the reference quant and the quants compared with it, "
    "decode tok/s against fidelity loss (KL mean where every quant has one, else the share of "
    "outputs not identical to the reference's); the rows are the non-dominated quants, and "
    "`answer` marks the fastest within the fidelity goal. `disturbed`: other work on the "
    "machine crossed the config's `checks` during that cell's bench; an answer whose choice "
    "rests on such a cell says so."
)


def frontier_points(
    table: pd.DataFrame, metrics: Mapping[str, Mapping[str, Any]], cells: Mapping[str, Cell]
) -> list[dict[str, Any]]:
    """Per model, engine and workload: the reference quant (loss 0) and each quant compared
    with it that has a speed and a fidelity figure, with `frontier` (non-dominated), `answer`
    (the fastest within the goal, where a goal is set, naming the disturbed quants its choice
    rests on) and `disturbed` (machine_use.disturbed)."""
    points: list[dict[str, Any]] = []
    quants = table[table["kind"] == QUANT]
    for (model, engine, workload), group in quants.groupby(
        ["model", "engine", "workload"], sort=False
    ):
        reference = group["reference_cell"].iloc[0]
        use_kld = group["kld_mean"].notna().all()
        measure = "kld_mean" if use_kld else "not_identical_pct"
        has_goal = group["goal_verdict"].notna().any()
        members = [
            {
                "cell": reference,
                "quant": cells[reference].quant,
                "decode_tok_s": number(metrics[reference].get("decode_tok_s")),
                "loss": 0.0,
                "goal_verdict": "pass" if has_goal else None,
            }
        ]
        for row in group.to_dict("records"):
            loss = row["kld_mean"] if use_kld else _not_identical(row)
            members.append(
                {
                    "cell": row["cell"],
                    "quant": row["quant"],
                    "decode_tok_s": number(row["decode_tok_s"]),
                    "loss": number(loss),
                    "goal_verdict": row["goal_verdict"] if has_goal else None,
                }
            )
        members = [m for m in members if m["decode_tok_s"] is not None and m["loss"] is not None]
        passing = [m for m in members if m["goal_verdict"] == "pass"]
        fastest = max(passing, key=lambda m: m["decode_tok_s"]) if passing else None
        # the answer is chosen by the speeds of every quant within the goal
        shaky = [m["quant"] for m in passing if disturbed(metrics.get(m["cell"]))]
        # the most speed for the least loss: loss negated, both maximised
        on = set(pareto_frontier([(-m["loss"], m["decode_tok_s"]) for m in members]))
        for i, m in enumerate(members):
            m.update(model=model, engine=engine, workload=workload, measure=measure)
            m["frontier"] = i in on
            m["answer"] = "fastest within the goal" + disturbed_note(shaky) if m is fastest else ""
            m["disturbed"] = bool(disturbed(metrics.get(m["cell"])))
        points += members
    return points


def _not_identical(row: Mapping[str, Any]) -> float | None:
    identical = number(row.get("identical_pct"))
    return None if identical is None else 100.0 - identical


def frontier_table(points: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """fidelity_frontier.csv: the frontier points, and the answer where it is off the frontier."""
    rows = [p for p in points if p["frontier"] or p["answer"]]
    return pd.DataFrame(rows, columns=FRONTIER_COLUMNS)
