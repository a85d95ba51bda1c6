"""A probe's judgement on disk (`slo.json` beside its metrics.json, no pandas): written by the
checkpoint `cell_slo` from the cell's files and its workload's goal file, read back as a verdict
(settled, or through the checkpoint), and a cut-short metrics.json or slo.json of a probe
removed so the probe is measured or judged again."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...atomic import write_json
from ...cell.record import unparsable
from ...loadgen.request_table import RequestTable
from ...slo.objectives import Slo
from ...slo.point import judge
from ...verdicts.verdict import Verdict
from ...vocabulary import Status
from ..record_index import load_cell
from .goals import read_goal


def slo_record(slo: Slo, metrics: Mapping[str, Any], requests: RequestTable) -> dict[str, Any]:
    """A cell's `slo.json`: the goal it was judged under and, for a cell that ran, its point
    result (`verdict` at the top, None for a cell that did not run: it decides nothing)."""
    result = judge(slo, metrics, requests)
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
    data = slo_record(read_goal(goal), cell_metrics, RequestTable.of(records))
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
    this goal, after the goal file and the probe's metrics were last written, the probe ran, and
    the judgement says which basis its latencies ran from (one written before could have judged
    an open-loop probe from the send); else None (ask its checkpoint). Why: Snakemake's own view
    of a checkpoint's output is empty while it builds the DAG, so a walk through
    `checkpoints.get` alone stops at the first probe every time, and the probe it should ask for
    next (one that failed, or not run yet) is only found in a later update, which does not rerun
    tables that exist."""
    try:
        data = json.loads(Path(judged).read_text())
        stamp = Path(judged).stat().st_mtime
        newer = stamp >= Path(metrics).stat().st_mtime and stamp >= Path(goal).stat().st_mtime
    except (OSError, ValueError):
        return None
    if not newer or data.get("slo") != slo.to_dict() or data.get("verdict") is None:
        return None
    if "latency_from" not in (data.get("result") or {}):
        return None  # judged before the basis was recorded: judged again (from the schedule)
    return Verdict(data["verdict"])
