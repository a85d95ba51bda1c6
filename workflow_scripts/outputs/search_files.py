"""A latency-goal search on disk, in one module that imports no pandas (the Snakefile's parse
imports it): the goal files a changed SLO reaches the DAG through, each cell's judgement
(`slo.json` beside its metrics.json), the walk a rule's input function runs over the probes'
verdicts, and each series' search read back as its outcome for the tables and the figure
(`outputs.slo_tables`).

Why files for the goal: Snakemake does not rerun a rule on a changed `params:` alone (measured,
docs/slo.md), but it does on an input newer than the output. So each goal is written at parse
time to a small file, only when its text changes; every judgement and the tables take it as an
input, and no cell does (a changed goal reruns no measurement).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import canonical_json, write_json, write_text_if_changed
from ..cell.record import unparsable
from ..config.probes import Search, probe_key
from ..process.machine_use import disturbed
from ..slo.objectives import Slo
from ..slo.point import PointResult, evaluate_point, judge
from ..slo.search import Plan, ProbeKey, SearchSettings, next_probe
from ..verdicts.verdict import Verdict
from ..vocabulary import Status
from .record_index import load_cell


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
        "model": cell.model,
        "engine": cell.engine,
        "quant": cell.quant,
        "drafter": cell.drafter,
        "workload": search.workload,
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


def slo_record(slo: Slo, metrics: Mapping[str, Any], records: list[Any]) -> dict[str, Any]:
    """A cell's `slo.json`: the goal it was judged under and, for a cell that ran, its point
    result (`verdict` at the top, None for a cell that did not run: it decides nothing)."""
    result = judge(slo, metrics, records)
    return {
        "cell": metrics.get("cell"),
        "status": metrics.get("status"),
        "slo": slo.to_dict(),
        "verdict": None if result is None else str(result.verdict),
        "result": None if result is None else result.to_dict(),
    }


def judge_files(goal: str | Path, metrics: str | Path, requests: str | Path, out: str | Path):
    """A cell's judgement from its files, read by the tables' reader: a result its own requests
    contradict is judged as the failed cell it is (no verdict, the reason kept)."""
    cell_metrics, records = load_cell(metrics, requests)
    data = slo_record(read_goal(goal), cell_metrics, records)
    if cell_metrics.get("status") != Status.DONE:
        data["reason"] = cell_metrics.get("reason")
    write_json(out, data)


def heal_probe(
    folder: str | Path, say: Callable[[str], None] | None = None, remove: bool = True
) -> bool:
    """A probe's metrics.json or slo.json that does not parse is removed, with a line naming it,
    so the walk treats the probe as not measured (a missing metrics.json: its cell runs again; a
    missing slo.json: it is judged again) instead of stopping the DAG build with a traceback.
    `remove` false (a dry run), or a folder that cannot be written: named, left as it is (the
    probe then reads as not judged). Returns whether a file was found that does not parse."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    found = False
    for name, also in (("metrics.json", ("slo.json",)), ("slo.json", ())):
        path = Path(folder) / name
        reason = unparsable(path)
        if reason is None:
            continue
        found = True
        again = "measured" if name == "metrics.json" else "judged"
        if not remove:
            say(f"{path} does not parse ({reason}): a run removes it, the probe is {again} again")
            continue
        try:
            for victim in (path, *(Path(folder) / other for other in also)):
                with contextlib.suppress(FileNotFoundError):
                    victim.unlink()
        except OSError as error:
            say(f"{path} does not parse ({reason}) and cannot be removed ({error})")
            continue
        say(f"{path} does not parse ({reason}): removed, the probe is {again} again")
    return found


def read_verdict(path: str | Path) -> Verdict | None:
    """A judged probe's verdict; None when its cell failed (it is retried next run) or when its
    judgement does not parse (heal_probe removes it: it is judged again)."""
    try:
        verdict = json.loads(Path(path).read_text()).get("verdict")
    except (OSError, ValueError, AttributeError):
        return None
    return None if verdict is None else Verdict(verdict)


def settled_verdict(
    judged: str | Path, metrics: str | Path, goal: str | Path, slo: Slo
) -> Verdict | None:
    """A probe's verdict read straight from its `slo.json` when that is settled: judged under
    this goal, after the goal file and the probe's metrics were last written, and the probe ran;
    else None (ask its checkpoint). Why: Snakemake's own view of a checkpoint's output is empty
    while it builds the DAG, so a walk through `checkpoints.get` alone stops at the first probe
    every time, and the probe it should ask for next (one that failed, or not run yet) is only
    found in a later update, which does not rerun tables that exist."""
    try:
        data = json.loads(Path(judged).read_text())
        stamp = Path(judged).stat().st_mtime
        newer = stamp >= Path(metrics).stat().st_mtime and stamp >= Path(goal).stat().st_mtime
    except (OSError, ValueError):
        return None
    if not newer or data.get("slo") != slo.to_dict() or data.get("verdict") is None:
        return None
    return Verdict(data["verdict"])


def walk(spec: SearchSettings, verdict_of: Callable[[ProbeKey], Verdict | None]) -> list[ProbeKey]:
    """The probes a search walks, in order, asking `verdict_of` for each (in a Snakefile: the
    probe's checkpoint, which schedules the probe and stops the walk while it is missing).
    Ends at the plan's answer, or at a probe that failed (None): retried next run, and a
    search does not decide past a load it could not measure."""
    verdicts: dict[ProbeKey, Verdict] = {}
    walked: list[ProbeKey] = []
    while True:
        plan = next_probe(spec, verdicts)
        if plan.done:
            return walked
        walked.append(plan.key)
        verdict = verdict_of(plan.key)
        if verdict is None:
            return walked
        verdicts[plan.key] = verdict


def probe_verdict(
    search: Search,
    key: ProbeKey,
    results_dir: str | Path,
    goals_dir: str | Path,
    checkpoint_verdict: Callable[[str], Verdict | None],
    dry_run: bool = False,
) -> Verdict | None:
    """The verdict of one probe of `search`: read from its settled judgement, else asked of
    `checkpoint_verdict(cell_id)` (in a Snakefile: the probe's checkpoint, None while it is not
    judged: the walk stops there, the probe is an input, and Snakemake walks again once its
    checkpoint is done) ; None too when its cell failed. A cut-short metrics.json or slo.json is
    removed with a line first (a dry run names it and leaves it), so the probe is redone."""
    cell = search.probe_id(key)
    folder = Path(results_dir) / "cells" / cell
    heal_probe(folder, remove=not dry_run)
    settled = settled_verdict(
        folder / "slo.json",
        folder / "metrics.json",
        goal_path(goals_dir, search.workload),
        search.slo,
    )
    return settled if settled is not None else checkpoint_verdict(cell)


def walked_probes(
    search: Search,
    results_dir: str | Path,
    goals_dir: str | Path,
    checkpoint_verdict: Callable[[str], Verdict | None],
    dry_run: bool = False,
) -> list[str]:
    """The probe ids a series' search walks so far, in order (each verdict by `probe_verdict`):
    what the tables rule takes as its inputs."""
    return [
        search.probe_id(key)
        for key in walk(
            search.settings,
            lambda key: probe_verdict(
                search, key, results_dir, goals_dir, checkpoint_verdict, dry_run
            ),
        )
    ]


def probe_cells(cells_dir: str | Path, searches: Iterable[Search]) -> list[str]:
    """The probes of `searches` that have a folder in `cells_dir` (run now or before), series by
    series, in load order: what the end-of-run lines show beside the matrix's cells."""
    out = []
    for search in searches:
        found = []
        for folder in Path(cells_dir).glob(f"{search.series}-*"):
            key = search.key_of(folder.name)
            if key is not None and folder.is_dir():
                found.append((key, folder.name))
        out += [cell for _, cell in sorted(found)]
    return out


def measured_probes(search: Mapping[str, Any], spec: SearchSettings, cells_dir: str | Path):
    """Every probe of the series measured so far (on the path of the current walk or not): key ->
    (metrics, records). A probe outside the walk is what shows a non-monotone law."""
    out = {}
    for folder in sorted(Path(cells_dir).glob(f"{search['series']}-*")):
        key = probe_key(search["series"], search["workload"], spec, folder.name)
        metrics_path, requests_path = folder / "metrics.json", folder / "requests.jsonl"
        if key is None or not (metrics_path.exists() and requests_path.exists()):
            continue
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

    def at(self, load: Any) -> PointResult | None:
        """The result the walk last measured at `load` (its last extension)."""
        steps = [s for s in self.plan.steps if s.load == load]
        return self.results.get(steps[-1].key) if steps else None


def search_outcome(search: Mapping[str, Any], cells_dir: str | Path) -> SearchOutcome:
    """A series' search as the tables see it: every measured probe re-judged under the current
    goal, and the plan those verdicts give (a failed probe gives no verdict: the plan asks for
    it again)."""
    slo = Slo.from_dict(search["slo"])
    spec = SearchSettings.from_dict(search["search"])
    results: dict[ProbeKey, PointResult] = {}
    failed: dict[ProbeKey, str] = {}
    shaky: set[ProbeKey] = set()
    for key, (metrics, records) in measured_probes(search, spec, cells_dir).items():
        if metrics.get("status") == Status.DONE:
            results[key] = evaluate_point(slo, records, metrics)
            if disturbed(metrics):
                shaky.add(key)
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
    )


def read_searches(search_files: Iterable[str | Path], cells_dir: str | Path) -> list[SearchOutcome]:
    return [search_outcome(json.loads(Path(p).read_text()), cells_dir) for p in search_files]
