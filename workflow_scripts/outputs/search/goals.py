"""A latency-goal search's goal files, written while the Snakefile is parsed (no pandas): each
workload's goal, what a cell's judgement reads, and each series' search, what the tables read.

Why files for the goal: Snakemake does not rerun a rule on a changed `params:` alone (measured,
docs/slo.md), but it does on an input newer than the output. So each goal is written at parse
time to a small file, only when its text changes; every judgement and the tables take it as an
input, and no cell does (a changed goal reruns no measurement).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ...atomic import canonical_json, write_text_if_changed
from ...config.probes import Search
from ...slo.objectives import Slo
from ...vocabulary import identity_columns


def goal_path(goals_dir: str | Path, workload: str) -> Path:
    return Path(goals_dir) / f"{workload}.json"


def search_path(goals_dir: str | Path, series: str) -> Path:
    return Path(goals_dir) / "search" / f"{series}.json"


def read_goal(path: str | Path) -> Slo:
    """A goal file, as `write_goal_files` wrote it."""
    return Slo.from_dict(json.loads(Path(path).read_text()))


def read_goals(paths: Iterable[str | Path]) -> dict[str, Slo]:
    """Goal files (`results/goals/<workload>.json`) -> workload name -> goal."""
    return {Path(p).stem: read_goal(p) for p in paths}


def goals_of(config: Mapping[str, Any]) -> dict[str, Slo]:
    """Each workload with an `slo` -> its goal (the config validated: its schema judged it)."""
    return {
        name: Slo.from_dict(workload["slo"])
        for name, workload in config["workloads"].items()
        if "slo" in workload
    }


def search_record(search: Search) -> dict[str, Any]:
    """What a series' search file holds: who the series is, its goal and its search."""
    cell = search.template
    return {
        "series": search.series,
        **identity_columns(cell),
        "workload": search.workload,  # the series' workload, not its template probe's
        "content": cell.workload_spec.dataset.content_label,
        "slo": search.slo.to_dict(),
        "search": search.settings.to_dict(),
    }


def write_goal_files(
    goals_dir: str | Path, goals: Mapping[str, Slo], searches: Iterable[Search]
) -> None:
    """Each workload's goal (`<dir>/<w>.json`: what a cell's judgement reads) and each series'
    search (`<dir>/search/<series>.json`: what the tables read), each rewritten only when it
    changes."""
    for workload, slo in goals.items():
        write_text_if_changed(goal_path(goals_dir, workload), canonical_json(slo.to_dict()) + "\n")
    for search in searches:
        write_text_if_changed(
            search_path(goals_dir, search.series), canonical_json(search_record(search)) + "\n"
        )
