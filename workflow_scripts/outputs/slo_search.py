"""A latency-goal search on disk: the goal files a changed SLO reaches the DAG through, each
cell's judgement (`slo.json` beside its metrics.json), the walk a rule's input function runs
over the probes' verdicts, and each series' search read back for the tables and the figure.

Why files for the goal: Snakemake does not rerun a rule on a changed `params:` alone (measured,
DESIGN.md), but it does on an input newer than the output. So each goal is written at parse
time to a small file, only when its text changes; every judgement and the tables take it as an
input, and no cell does (a changed goal reruns no measurement).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..atomic import canonical_json, write_json, write_text
from ..config.probes import SearchSeries, probe_key
from ..config.search import Plan, ProbeKey, SearchSpec, next_probe
from ..loadgen.records import RequestRecord
from ..slo.objectives import Slo
from ..slo.point import PointResult, evaluate_point
from ..slo.verdict import Verdict
from ..vocabulary import Status
from .record_index import load_cell
from .slo_tables import SeriesSearch


def goal_path(goals_dir: str | Path, workload: str) -> Path:
    return Path(goals_dir) / f"{workload}.json"


def search_path(goals_dir: str | Path, series: str) -> Path:
    return Path(goals_dir) / "search" / f"{series}.json"


def write_if_changed(path: Path, data: Any) -> bool:
    """Write `data` as canonical JSON unless the file already holds exactly that: an unchanged
    goal keeps its mtime, so it reruns nothing."""
    text = canonical_json(data) + "\n"
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    write_text(path, text)
    return True


def goals_of(config: Mapping[str, Any]) -> dict[str, Slo]:
    """Each workload with an `slo` -> its goal (validated: the config checks ran)."""
    return {
        name: Slo.from_config(workload["slo"], f"workloads.{name}.slo")
        for name, workload in config["workloads"].items()
        if "slo" in workload
    }


def search_record(search: SearchSeries) -> dict[str, Any]:
    """What a series' search file holds: who the series is, its goal and its search."""
    cell = search.template
    return {
        "series": search.series,
        "model": cell.model,
        "engine": cell.engine,
        "quant": cell.quant,
        "drafter": cell.drafter,
        "workload": search.workload,
        "slo": search.slo.to_dict(),
        "search": search.spec.to_dict(),
    }


def write_goal_files(
    goals_dir: str | Path, goals: Mapping[str, Slo], searches: Iterable[SearchSeries]
) -> None:
    """Each workload's goal (`<dir>/<w>.json`: what a cell's judgement reads) and each series'
    search (`<dir>/search/<series>.json`: what the tables read), each rewritten only when it
    changes."""
    for workload, slo in goals.items():
        write_if_changed(goal_path(goals_dir, workload), slo.to_dict())
    for search in searches:
        write_if_changed(search_path(goals_dir, search.series), search_record(search))


def judge(slo: Slo, metrics: Mapping[str, Any], records: list[RequestRecord]) -> dict[str, Any]:
    """A cell's `slo.json`: the goal it was judged under and, for a cell that ran, its point
    result (`verdict` at the top, None for a cell that did not run: it decides nothing)."""
    out: dict[str, Any] = {
        "cell": metrics.get("cell"),
        "status": metrics.get("status"),
        "slo": slo.to_dict(),
        "verdict": None,
        "result": None,
    }
    if metrics.get("status") == Status.DONE:
        result = evaluate_point(slo, records, metrics)
        out["verdict"] = str(result.verdict)
        out["result"] = result.to_dict()
    return out


def judge_files(goal: str | Path, metrics: str | Path, requests: str | Path, out: str | Path):
    """A cell's judgement from its files, read by the tables' reader: a result its own requests
    contradict is judged as the failed cell it is (no verdict, the reason kept)."""
    slo = Slo.from_config(json.loads(Path(goal).read_text()), "goal")
    cell_metrics, records = load_cell(metrics, requests)
    data = judge(slo, cell_metrics, records)
    if cell_metrics.get("status") != Status.DONE:
        data["reason"] = cell_metrics.get("reason")
    write_json(out, data)


def unparsable(path: str | Path) -> str | None:
    """Why a JSON file that exists does not parse as an object (cut short, damaged); None when
    it parses or is not there."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return None if isinstance(data, dict) else "not a JSON object"


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


def walk(spec: SearchSpec, verdict_of: Callable[[ProbeKey], Verdict | None]) -> list[ProbeKey]:
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


def probe_cells(cells_dir: str | Path, searches: Iterable[SearchSeries]) -> list[str]:
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


def measured_probes(search: Mapping[str, Any], spec: SearchSpec, cells_dir: str | Path):
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


def series_search(search: Mapping[str, Any], cells_dir: str | Path) -> SeriesSearch:
    """A series' search as the tables see it: every measured probe re-judged under the current
    goal, and the plan those verdicts give (a failed probe gives no verdict: the plan asks for
    it again)."""
    slo = Slo.from_config(search["slo"], "slo")
    spec = SearchSpec.from_config(search["search"], "search")
    results: dict[ProbeKey, PointResult] = {}
    failed: dict[ProbeKey, str] = {}
    for key, (metrics, records) in measured_probes(search, spec, cells_dir).items():
        if metrics.get("status") == Status.DONE:
            results[key] = evaluate_point(slo, records, metrics)
        else:
            failed[key] = metrics.get("reason") or str(metrics.get("status"))
    plan: Plan = next_probe(spec, {key: r.verdict for key, r in results.items()})
    return SeriesSearch(
        series=search["series"],
        model=search["model"],
        engine=search["engine"],
        quant=search["quant"],
        drafter=search["drafter"],
        workload=search["workload"],
        slo=slo,
        spec=spec,
        plan=plan,
        results=results,
        failed=failed,
    )


def read_searches(search_files: Iterable[str | Path], cells_dir: str | Path) -> list[SeriesSearch]:
    return [series_search(json.loads(Path(p).read_text()), cells_dir) for p in search_files]


def search_points(search: SeriesSearch) -> list[dict[str, Any]]:
    """One row per measured probe (the walk's last extension at each load, and any probe off the
    walk): what the figure draws."""
    walked = {step.key for step in search.plan.steps}
    last: dict[Any, ProbeKey] = {}
    for key in sorted(search.results, key=lambda k: (k[0], k[1])):
        last[key[0]] = key
    rows = []
    for load, key in sorted(last.items()):
        result = search.results[key]
        for objective in result.objectives:
            rows.append(
                {
                    "series": search.series,
                    "load": load,
                    "figure": objective.objective.label,
                    "limit": objective.objective.max_ms,
                    "value": objective.bound.value,
                    "lo": objective.bound.lo,
                    "hi": objective.bound.hi,
                    "verdict": str(result.verdict),
                    "walked": key in walked,
                }
            )
    return rows


VERDICT_MARKERS = {
    "pass": ("o", "#2a9d3f"),
    "fail": ("x", "#c0392b"),
    "unresolved": ("s", "#999999"),
}


def search_figure(searches: list[SeriesSearch]):
    """Each series' probes against load, one panel per objective: the measured percentile with
    its confidence interval, marked by verdict, and the objective's limit as a line."""
    from .plots import message_figure, plt

    rows = [row for search in searches for row in search_points(search)]
    if not rows:
        return message_figure("Latency goals", "no probe measured yet")
    figures = list(dict.fromkeys(row["figure"] for row in rows))
    fig, axes = plt.subplots(1, len(figures), figsize=(6.5 * len(figures), 4.2), squeeze=False)
    for ax, name in zip(axes[0], figures, strict=True):
        panel = [row for row in rows if row["figure"] == name]
        for index, series in enumerate(dict.fromkeys(row["series"] for row in panel)):
            points = sorted((r for r in panel if r["series"] == series), key=lambda r: r["load"])
            color = f"C{index}"
            ax.plot(
                [r["load"] for r in points],
                [r["value"] for r in points],
                color=color,
                alpha=0.6,
                label=series,
            )
            for r in points:
                marker, edge = VERDICT_MARKERS[r["verdict"]]
                if r["lo"] is not None or r["hi"] is not None:
                    lo = r["lo"] if r["lo"] is not None else r["value"]
                    hi = r["hi"] if r["hi"] is not None else r["value"]
                    ax.vlines(r["load"], lo, hi, color=color, alpha=0.4)
                ax.scatter([r["load"]], [r["value"]], marker=marker, color=edge, zorder=3, s=40)
        for limit in sorted({r["limit"] for r in panel}):
            ax.axhline(limit, color="black", linestyle="--", linewidth=1)
            ax.annotate(
                f"limit {limit:g} ms",
                (0.01, limit),
                xycoords=("axes fraction", "data"),
                va="bottom",
                fontsize=8,
            )
        ax.set_xscale("log", base=2)
        loads = sorted({r["load"] for r in panel})
        ax.set_xticks(loads, [f"{load:g}" for load in loads])
        ax.minorticks_off()
        ax.set_xlabel(searches[0].spec.over.replace("_", " "))
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{name}: o pass, x fail, ■ unresolved")
        ax.legend(fontsize=7)
    return fig


def slo_tables_from_snakemake(sm) -> None:
    """slo.csv/md, slo_drafter.csv/md, their HTML page and the figure, from the series' search
    files (the probes are read from the cells folder beside them)."""
    from .plots import save_figure
    from .report_html import write_tables_html
    from .slo_tables import DRAFTER_GOAL_INTRO, write_slo_tables

    searches = read_searches(sm.input.searches, sm.params.cells_dir)
    slo, drafter = write_slo_tables(searches, sm.output)
    write_tables_html(
        sm.output.slo_html,
        "Latency goals",
        [
            ("Largest load served within the goal", slo, ""),
            ("The drafter at the goal", drafter, DRAFTER_GOAL_INTRO),
        ],
    )
    save_figure(search_figure(searches), sm.output.figure)
