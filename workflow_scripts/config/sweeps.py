"""A workload's sweep: a list in `concurrency` or `request_rate` makes one point per value, each a
cell of its own whose workload part names the point (`<w>-c8`, `<w>-r2.5`).

A point's id depends only on its own value, so adding a point to a sweep leaves every other
point's id, folder and settings as they were.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..vocabulary import Cell, ConfigError, Workload, point_part, point_value

AXES = ("concurrency", "request_rate")
DEFAULT_WARMUP_REQUESTS = 1
# Keys that shape the points, not the load of one point: no cell's Workload carries them.
SWEEP_ONLY_KEYS = (
    "repeats",
    "slo",  # judged from a cell's requests after it ran: a changed goal reruns no cell
    "search",
    "share_server",
    "num_prompts_per_concurrency",
    "warmup_per_concurrency",
)


@dataclass(frozen=True)
class Point:
    """One point of a workload: the workload part of its cells' ids, the load it sets (a
    scalar workload entry, as `Workload.from_dict` takes it) and, in a sweep, its axis and
    value."""

    part: str
    entry: dict[str, Any]
    axis: str | None = None
    value: float | None = None


def check_workload(name: str, workload: dict[str, Any]) -> None:
    """What the schema cannot say: one swept axis at a time, and a prompt or warm-up count given
    once (a fixed count beside a per-concurrency one would leave unsaid which wins)."""
    where = f"workloads.{name}"
    swept = [axis for axis in AXES if isinstance(workload.get(axis), list)]
    if len(swept) == 2:
        raise ConfigError(
            f"config key '{where}.request_rate': concurrency and request_rate are both lists; "
            "a sweep varies one of them (give the other one value)"
        )
    for fixed, scaled in (
        ("num_prompts", "num_prompts_per_concurrency"),
        ("warmup_requests", "warmup_per_concurrency"),
    ):
        if fixed in workload and scaled in workload:
            raise ConfigError(
                f"config key '{where}.{scaled}': beside a fixed {fixed}; give one of them"
            )
    if workload.get("dataset", {}).get("kind") == "trace":
        for key, why in (("request_rate", "arrivals"), ("shared_prefix", "prompts")):
            if workload.get(key):
                raise ConfigError(f"config key '{where}.{key}': a trace's {why} are its own")
    if workload.get("shared_prefix") and workload.get("dataset", {}).get("conversations"):
        raise ConfigError(
            f"config key '{where}.shared_prefix': not with conversations (their turns carry "
            "their own history)"
        )
    if "num_prompts" not in workload and "num_prompts_per_concurrency" not in workload:
        raise ConfigError(
            f"config key '{where}.num_prompts': missing (or give num_prompts_per_concurrency)"
        )


def axis_of(workload: dict[str, Any]) -> str | None:
    """The axis a workload sweeps, or None."""
    return next((axis for axis in AXES if isinstance(workload.get(axis), list)), None)


def points(name: str, workload: dict[str, Any]) -> list[Point]:
    """The points of a validated workload, in configured order: one for a workload that sweeps
    nothing (its part is the workload's name)."""
    axis = axis_of(workload)
    if axis is None:
        return [Point(name, _load_of(workload, None, None))]
    return [
        Point(point_part(name, axis, value), _load_of(workload, axis, value), axis, value)
        for value in workload[axis]
    ]


def point_entry(workload: dict[str, Any], axis: str, value: float) -> dict[str, Any]:
    """The load of one point at `value` on `axis` (a search's probe), as a sweep's point has it."""
    return _load_of(workload, axis, value)


def cell_workload(entry: dict[str, Any], engine_spec: dict[str, Any]) -> Workload:
    """A point's load as its cell runs it: the client sends the key the server requires unless
    the workload names its own variable (a matrix's cell and a search's probe alike)."""
    entry = dict(entry)
    if engine_spec.get("api_key_env") and "api_key_env" not in entry:
        entry["api_key_env"] = engine_spec["api_key_env"]
    return Workload.from_dict(entry)


def _load_of(workload: dict[str, Any], axis: str | None, value: float | None) -> dict[str, Any]:
    """One point's load: the swept value in place of the list, and the prompt and warm-up
    counts scaled by its concurrency where the workload scales them."""
    entry = {k: v for k, v in workload.items() if k not in SWEEP_ONLY_KEYS}
    if axis is not None:
        entry[axis] = point_value(axis, value)
    concurrency = entry["concurrency"]
    if "num_prompts_per_concurrency" in workload:
        entry["num_prompts"] = workload["num_prompts_per_concurrency"] * concurrency
    if "warmup_per_concurrency" in workload:
        entry["warmup_requests"] = workload["warmup_per_concurrency"] * concurrency
    entry.setdefault("warmup_requests", DEFAULT_WARMUP_REQUESTS)
    return entry


def shared_series(cells: Iterable[Cell]) -> dict[str, list[Cell]]:
    """The series whose points share one server start -> their runnable points, lightest load
    first (the order they take their turns in)."""
    out: dict[str, list[Cell]] = {}
    for cell in cells:
        if cell.sweep and cell.sweep.shared_server and not cell.blocked:
            out.setdefault(cell.sweep.series, []).append(cell)
    for points in out.values():
        points.sort(key=lambda cell: cell.sweep.value)
    return out


def launch_cell(points: list[Cell]) -> Cell:
    """The point the series' server is started for: the one with the most requests in flight
    (llama.cpp sizes its slots by it) and then the most prompts (what the context guard sizes
    for). Every point of a series has the same engine, weights and settings."""
    return max(points, key=lambda c: (c.concurrency, c.workload_spec.num_prompts, -c.sweep.value))


# A point of a shared series asks for nothing of its own: the series' server job holds the
# machine (its GPUs, memory, CPUs) for all of them, and Snakemake adds up what the jobs of a
# group that run at once ask for.
SHARED_POINT_SIZES = {"gpu": 0, "mem_mb": 0, "cpus_per_task": None, "machine": 0}


def series_resources(
    series: dict[str, list[Cell]], by_cell: dict[str, dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(each cell's resources with a shared point's zeroed, each series' server job's): the
    launch point's, with the points' run times added up (they run one after another) and at
    least one CPU (the Slurm executor asks sbatch for a 0-thread job's `--cpus-per-task=0`)."""
    cells = {cell: dict(resources, machine=1) for cell, resources in by_cell.items()}
    servers = {}
    for name, points in series.items():
        server = dict(cells[launch_cell(points).id])
        runtimes = [by_cell[p.id].get("runtime") for p in points]
        if all(isinstance(r, int | float) for r in runtimes):
            server["runtime"] = sum(runtimes)
        server["cpus_per_task"] = server.get("cpus_per_task") or 1
        servers[name] = server
        for point in points:
            cells[point.id].update(SHARED_POINT_SIZES)
    return cells, servers
