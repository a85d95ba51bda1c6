"""A series' search read back as its outcome, for the tables and the figure (no pandas): its
probes found in the cells folder, every one measured so far, on the current walk or not (a
probe off the walk, measured under an earlier goal, is what shows a non-monotone law: the DAG's
walk does not reach it), each re-judged under the current goal, and the plan those verdicts
give. The same listing gives the end-of-run lines the probes run so far."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...config.probes import Search, probe_key
from ...loadgen.request_table import RequestTable
from ...process.machine_use import disturbed
from ...slo.objectives import Slo
from ...slo.point import PointResult, evaluate_point
from ...slo.search import Plan, ProbeKey, SearchSettings, next_probe
from ...vocabulary import Status
from ..record_index import load_cell


def probe_folders(
    cells_dir: str | Path, series: str, workload: str, spec: SearchSettings
) -> list[tuple[ProbeKey, Path]]:
    """Each entry of `cells_dir` named as a probe of the series (run now or before, on the
    current walk or not), with its key, in load order."""
    found = []
    for folder in Path(cells_dir).glob(f"{series}-*"):
        key = probe_key(series, workload, spec, folder.name)
        if key is not None:
            found.append((key, folder))
    return sorted(found)


def probe_cells(cells_dir: str | Path, searches: Iterable[Search]) -> list[str]:
    """The probes of `searches` that have a folder in `cells_dir` (run now or before), series by
    series, in load order: what the end-of-run lines show beside the matrix's cells."""
    return [
        folder.name
        for search in searches
        for _, folder in probe_folders(cells_dir, search.series, search.workload, search.settings)
        if folder.is_dir()
    ]


def measured_probes(search: Mapping[str, Any], spec: SearchSettings, cells_dir: str | Path):
    """Every probe of the series measured so far (on the path of the current walk or not): key ->
    (metrics, records). A probe outside the walk is what shows a non-monotone law."""
    out = {}
    for key, folder in probe_folders(cells_dir, search["series"], search["workload"], spec):
        metrics_path, requests_path = folder / "metrics.json", folder / "requests.jsonl"
        if metrics_path.exists() and requests_path.exists():
            out[key] = load_cell(metrics_path, requests_path)
    return out


@dataclass(frozen=True)
class SearchOutcome:
    """One series' search as the summary sees it (the search to run: `config.probes.Search`):
    who it is (`workload` is the configured workload's name, what a drafter series and its base
    share), its goal and search, the plan the verdicts so far give, each measured probe's result,
    why each failed probe failed (its cell failed, or its result is invalid), and which probes
    other work on the machine disturbed."""

    series: str
    model: str
    engine: str
    quant: str
    drafter: str
    workload: str
    slo: Slo
    settings: SearchSettings
    plan: Plan
    results: Mapping[ProbeKey, PointResult]
    failed: Mapping[ProbeKey, str] = field(default_factory=dict)
    content: str | None = None  # what its prompts are (DatasetSettings.content_label)
    disturbed: frozenset[ProbeKey] = frozenset()  # probes other work disturbed (machine_use)
    energy: Mapping[ProbeKey, Mapping[str, Any]] = field(default_factory=dict)  # its `energy`

    def at(self, load: Any) -> PointResult | None:
        """The result the walk last measured at `load` (its last extension)."""
        steps = [s for s in self.plan.steps if s.load == load]
        return self.results.get(steps[-1].key) if steps else None

    def energy_at(self, load: Any) -> Mapping[str, Any] | None:
        """The metrics.json `energy` of the probe `at` reads (None: none, or none recorded)."""
        steps = [s for s in self.plan.steps if s.load == load]
        return self.energy.get(steps[-1].key) if steps else None


def search_outcome(search: Mapping[str, Any], cells_dir: str | Path) -> SearchOutcome:
    """A series' search as the tables see it: every measured probe re-judged under the current
    goal, and the plan those verdicts give (a failed probe gives no verdict: the plan asks for
    it again)."""
    slo = Slo.from_dict(search["slo"])
    spec = SearchSettings.from_dict(search["search"])
    results: dict[ProbeKey, PointResult] = {}
    failed: dict[ProbeKey, str] = {}
    shaky: set[ProbeKey] = set()
    energy: dict[ProbeKey, Mapping[str, Any]] = {}
    for key, (metrics, records) in measured_probes(search, spec, cells_dir).items():
        if metrics.get("status") == Status.DONE:
            results[key] = evaluate_point(slo, RequestTable.of(records), metrics)
            if disturbed(metrics):
                shaky.add(key)
            if isinstance(metrics.get("energy"), Mapping):
                energy[key] = metrics["energy"]
        else:
            failed[key] = metrics.get("reason") or str(metrics.get("status"))
    plan: Plan = next_probe(spec, {key: r.verdict for key, r in results.items()})
    return SearchOutcome(
        series=search["series"],
        model=search["model"],
        engine=search["engine"],
        quant=search["quant"],
        drafter=search["drafter"],
        workload=search["workload"],
        slo=slo,
        settings=spec,
        plan=plan,
        results=results,
        failed=failed,
        content=search.get("content"),
        disturbed=frozenset(shaky),
        energy=energy,
    )


def read_searches(search_files: Iterable[str | Path], cells_dir: str | Path) -> list[SearchOutcome]:
    return [search_outcome(json.loads(Path(p).read_text()), cells_dir) for p in search_files]
