"""Config checks of output fidelity that need the cells: a fidelity goal or a floor run that
compares outputs beside a workload that keeps none (`record_outputs: false`), and a goal
bounding a KL figure for a model no engine of the matrix can measure it for (fidelity.kld_plan).
Each refusal names the keys that contradict each other, before anything runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..fidelity.goals import KLD_FIGURES
from ..fidelity.kld_plan import no_kld_reason
from ..vocabulary import Cell, ConfigError

# The goal's figure read from the cells' outputs (the others come from llama-perplexity).
OUTPUT_FIGURE = "agreement_of_floor_pct"


def goal_of(config: Mapping[str, Any], model: str) -> tuple[str, Mapping[str, Any]] | None:
    """A model's fidelity goal and the key it is set at (its own, else the matrix-wide one)."""
    if config["models"][model].get("fidelity"):
        return f"models.{model}.fidelity", config["models"][model]["fidelity"]
    if config.get("fidelity"):
        return "fidelity", config["fidelity"]
    return None


def _not_recording(config: Mapping[str, Any], cells: Sequence[Cell]) -> str | None:
    """The first workload of these cells that keeps no outputs."""
    for cell in cells:
        if not config["workloads"][cell.workload_name].get("record_outputs", True):
            return cell.workload_name
    return None


def check_outputs_recorded(
    config: Mapping[str, Any], cells: Sequence[Cell], entry_of: Mapping[str, int]
) -> None:
    """`fidelity_floor: true`, or a goal on agreement of the floor, beside a workload of the
    same cells with `record_outputs: false`: refused, naming both keys."""
    running = [c for c in cells if not c.blocked]
    for index, entry in enumerate(config["cells"]):
        if not entry.get("fidelity_floor", False):
            continue
        workload = _not_recording(config, [c for c in running if entry_of.get(c.id) == index])
        if workload:
            raise ConfigError(
                f"config keys 'cells[{index}].fidelity_floor' and 'workloads.{workload}."
                "record_outputs': a floor run compares outputs, and this workload keeps none; "
                "record its outputs, or drop fidelity_floor"
            )
    for model in config["models"]:
        goal = goal_of(config, model)
        if goal is None or OUTPUT_FIGURE not in goal[1]:
            continue
        workload = _not_recording(config, [c for c in running if c.model == model])
        if workload:
            raise ConfigError(
                f"config keys '{goal[0]}.{OUTPUT_FIGURE}' and 'workloads.{workload}."
                f"record_outputs': the goal of model '{model}' is judged on its outputs, and "
                "this workload keeps none; record its outputs, or bound KL figures only"
            )


def check_goals_measurable(config: Mapping[str, Any], cells: Sequence[Cell]) -> None:
    """A goal bounding a KL figure (KL mean, KL p99, same top %) for a model with cells that
    run, none of whose engines can measure it: refused, naming the key and why."""
    for model in config["models"]:
        goal = goal_of(config, model)
        bounded = [f for f in KLD_FIGURES if goal and f in goal[1]]
        if not bounded or not any(c.model == model and not c.blocked for c in cells):
            continue
        why = no_kld_reason(config, model, cells)
        if why:
            where = "" if goal[0].startswith("models.") else f" in models.{model}.fidelity"
            raise ConfigError(
                f"config key '{goal[0]}.{bounded[0]}': model '{model}' has no KL divergence "
                f"step: {why}; bound {OUTPUT_FIGURE} only{where}, or run the model on such "
                "an engine"
            )


def check_fidelity(
    config: Mapping[str, Any], cells: Sequence[Cell], entry_of: Mapping[str, int]
) -> None:
    """Both checks, once the cells are built (config.matrix.build_matrix)."""
    check_outputs_recorded(config, cells, entry_of)
    check_goals_measurable(config, cells)
