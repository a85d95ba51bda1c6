"""What a cell asks of the machine or cluster it runs on: GPUs, memory, wall time, CPUs and,
on Slurm, partition, account and extra sbatch flags.

Resources say where a cell runs, never what it measures, so they are split off the config
before cells are built: editing them reruns nothing. Each cell's resources are the matrix-wide
`resources`, overridden by its engine's, overridden by its `cells` entry's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from .layers import layers
from .matrix import Matrix, build_matrix

# A blocked cell only writes its reason: it must never wait in a queue for a GPU, so it also
# drops slurm_extra (which may ask for one, e.g. `--gres=gpu:a100:1`).
BLOCKED_SIZES = {"gpu": 0, "cpus_per_task": 1, "mem_mb": 1024, "runtime": 5}


def layered_resources(config: dict[str, Any], engine: str, entry: int) -> dict[str, Any]:
    """The matrix-wide `resources`, overridden key by key by engine `engine`'s, overridden by
    those of `cells` entry `entry` (its index): a fresh dict, the config untouched."""
    merged: dict[str, Any] = {}
    for layer in layers(config, "resources", engine, entry):
        merged.update(layer)
    return merged


def resources_by_cell(
    config: dict[str, Any], matrix: Matrix | None = None
) -> dict[str, dict[str, Any]]:
    """Cell id -> its resources, for a validated config (defaults filled in); `matrix`: its
    cells, where already built (the Snakefile builds them once)."""
    matrix = matrix or build_matrix(config)
    out: dict[str, dict[str, Any]] = {}
    for cell in matrix.cells:
        resources = layered_resources(config, cell.engine, matrix.entry_of[cell.id])
        if cell.blocked:
            resources.update(BLOCKED_SIZES)
            resources.pop("slurm_extra", None)
        out[cell.id] = resources
    return out


def resources_by_search(
    config: dict[str, Any], matrix: Matrix | None = None
) -> dict[str, dict[str, Any]]:
    """Searched series -> the resources each of its probes asks for (as its cells entry's cells)."""
    matrix = matrix or build_matrix(config)
    return {
        series: layered_resources(config, search.template.engine, matrix.entry_of[series])
        for series, search in matrix.searches.items()
    }


def without_resources(config: dict[str, Any]) -> dict[str, Any]:
    """The config with every `resources` block removed: what the cells' settings are built from."""
    stripped = {key: value for key, value in config.items() if key != "resources"}
    stripped["engines"] = {
        name: {key: value for key, value in engine.items() if key != "resources"}
        for name, engine in config["engines"].items()
    }
    stripped["cells"] = [
        {key: value for key, value in entry.items() if key != "resources"}
        for entry in config["cells"]
    ]
    return stripped


def declared_resources(
    every: Collection[dict[str, Any]],
    lookup: Callable[[Any], dict[str, Any]],
    leave_out: Collection[str] = (),
) -> dict[str, Any]:
    """A rule's `resources:`, for jobs whose resources are `every` (`lookup(wildcards)`: one
    job's): each key some job sets, as the value itself when every job asks the same, else a
    function of the job (the workflow side hands it to Snakemake: workflow/job_functions.py).
    Snakemake evaluates every declared resource of every job: a key no job sets (None, the
    cluster's default) is left out."""
    keys = dict.fromkeys(key for resources in every for key in resources if key not in leave_out)
    declared: dict[str, Any] = {}
    for key in keys:
        values = {resources.get(key) for resources in every}
        if len(values) > 1:
            declared[key] = _resource_of_job(lookup, key)
        elif None not in values:
            declared[key] = values.pop()
    return declared


def _resource_of_job(lookup: Callable[[Any], dict[str, Any]], key: str) -> Callable[[Any], Any]:
    def of_job(wildcards):
        return lookup(wildcards).get(key)

    return of_job
