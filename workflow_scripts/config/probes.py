"""A latency-goal search's probes as cells. A search's probes are not known when the Snakefile is
parsed (each next load depends on the last verdict), so the matrix holds one `Search` per
model x engine x quant x drafter x searching workload, and a probe's cell is built from it on
demand, by id: `<series>-c8` (extension k: `<series>-c8-xk`).

A probe is keyed by what it measures, its load and extension, never by its step of the search:
a changed goal re-walks the same loads and reuses every probe measured before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..slo.objectives import Slo
from ..slo.search import CONCURRENCY, ProbeKey, SearchSettings
from ..vocabulary import Cell, ConfigError, SweepPoint
from . import sweeps
from .search import goal_of, load_label, probe_part

LONGEST_RATE = "0.000123457"  # a probe's rate at its longest: 6 digits (slo.search) from 1e-4


@dataclass(frozen=True)
class Search:
    """One series' search to run (its outcome: `outputs.search.outcome.SearchOutcome`): the cell
    its probes are made from (its load the search's min), the configured workload it searches,
    its goal and its search."""

    series: str  # model__engine__quant__drafter__<w>
    template: Cell
    workload: str
    workload_entry: Mapping[str, Any]  # the configured workload, as validated
    slo: Slo
    settings: SearchSettings
    where: str  # the cells entry it comes from (what resources and errors name)

    def probe_id(self, key: ProbeKey) -> str:
        return self.series.removesuffix(self.workload) + probe_part(
            self.settings, self.workload, key
        )

    def probe(self, key: ProbeKey) -> Cell:
        """The cell that measures `key` = (load, extension): a fresh server of its own, the load
        set, and extension k running `settings.prompts_for` times the prompts."""
        load, extension = key
        entry = sweeps.point_entry(self.workload_entry, self.settings.over, load)
        entry["num_prompts"] = self.settings.prompts_for(entry["num_prompts"], extension)
        part = probe_part(self.settings, self.workload, key)
        return replace(
            self.template,
            id=self.probe_id(key),
            workload=part,
            workload_spec=sweeps.cell_workload(entry, self.template.engine_spec),
            sweep=SweepPoint(
                workload=self.workload,
                axis=self.settings.over,
                value=load,
                series=self.series,
                shared_server=False,
            ),
        )

    def longest_probe_id(self) -> str:
        """The longest id a probe of this search may take (the file names made from it must
        fit): at its max with every extension; a searched rate's midpoints may be written longer
        than its max (six significant digits from 1e-4: `r0.000123457`)."""
        spec = self.settings
        at_max = self.probe_id((spec.max, spec.max_extensions))
        if spec.over == CONCURRENCY:
            return at_max
        extension = f"-x{spec.max_extensions}" if spec.max_extensions else ""
        return max(at_max, f"{self.series}-r{LONGEST_RATE}{extension}", key=len)

    def key_of(self, cell_id: str) -> ProbeKey | None:
        """`<series>-c8-x1` -> (8, 1); None when the id is no probe of this series."""
        return probe_key(self.series, self.workload, self.settings, cell_id)


def probe_key(series: str, workload: str, spec: SearchSettings, cell_id: str) -> ProbeKey | None:
    """The (load, extension) a probe id of `series` names; None for any other id (only the
    canonical spelling counts: `c08` is not `c8`; a load outside the search is no probe)."""
    if not cell_id.startswith(series + "-"):
        return None
    match = _PROBE.match(cell_id[len(series) + 1 :])
    if not match or match.group("letter") != spec.letter:
        return None
    key = (spec.normal(float(match.group("load"))), int(match.group("ext") or 0))
    part = probe_part(spec, workload, key)
    if series.removesuffix(workload) + part != cell_id or key[1] > spec.max_extensions:
        return None
    return key if spec.min <= key[0] <= spec.max else None


_PROBE = re.compile(r"^(?P<letter>[cr])(?P<load>[0-9]+(?:\.[0-9]+)?)(?:-x(?P<ext>[1-9][0-9]*))?$")


def searching(workload: Mapping[str, Any]) -> bool:
    return "search" in workload


def template_entry(workload: Mapping[str, Any]) -> dict[str, Any]:
    """A searching workload as one point at the search's min: what its template cell runs."""
    spec = workload["search"]
    return {**workload, spec["over"]: spec["min"]}


def search_series(name: str, cell: Cell, workload: Mapping[str, Any], where: str) -> Search:
    slo, spec = goal_of(name, workload)
    return Search(
        series=cell.id,
        template=cell,
        workload=name,
        workload_entry=workload,
        slo=slo,
        settings=spec,
        where=where,
    )


def probe_of(searches: Mapping[str, Search], cell_id: str) -> tuple[Search, ProbeKey] | None:
    """The search and key a cell id names, or None (an id of the matrix, or of nothing)."""
    series = cell_id.rpartition("-")[0]
    for _ in range(2):  # `<series>-c8` or `<series>-c8-x1`
        search = searches.get(series)
        if search is not None:
            key = search.key_of(cell_id)
            return (search, key) if key is not None else None
        series = series.rpartition("-")[0]
    return None


def check_search_workload(name: str, workload: Mapping[str, Any]) -> None:
    """A workload's goal and search, checked before anything runs; `concurrency` is required
    except beside a search over it, where it is refused (the search sets it)."""
    _, spec = goal_of(name, workload)
    where = f"workloads.{name}"
    if spec is not None and spec.over == CONCURRENCY:
        if "concurrency" in workload:
            raise ConfigError(
                f"config key '{where}.concurrency': beside a search over concurrency; the "
                "search sets each probe's concurrency (drop it)"
            )
    elif "concurrency" not in workload:
        raise ConfigError(f"config key '{where}.concurrency': missing")
    if spec is not None and workload.get("repeats", 1) != 1:
        raise ConfigError(
            f"config key '{where}.repeats': beside a search; a search's probes are its repeats "
            "(an unresolved load is rerun with more prompts)"
        )
    prompts = workload.get("num_prompts")
    if spec is not None and spec.over == CONCURRENCY and prompts is not None and spec.max > prompts:
        raise ConfigError(
            f"config key '{where}.search.max': {spec.max}; above num_prompts {prompts}, a probe "
            f"sends its {prompts} prompts at once, the load of c{prompts} under a larger label "
            f"(set max to at most {prompts}, or give num_prompts_per_concurrency)"
        )


def check_probe_ids(ids: Mapping[str, str], searches: Mapping[str, Search]) -> None:
    """No cell (or searched series) of the matrix has a probe's id: the search would read that
    cell's result as its probe (a workload named `w-c8` beside a search of workload `w`).
    `ids`: each id -> the key path of the cells entry it comes from."""
    if not searches:
        return
    for cell_id, where in ids.items():
        found = probe_of(searches, cell_id)
        if found is None:
            continue
        search, key = found
        raise ConfigError(
            f"config key '{where}': cell '{cell_id}' has the id of probe "
            f"{load_label(search.settings, key[0])} of the search of workload '{search.workload}' "
            f"({search.where}), which would read that cell as its probe; rename workload "
            f"'{cell_id.rpartition('__')[2]}' or '{search.workload}'"
        )
