"""A sweep series' fidelity family, once per series: every point's pair judged as fidelity.csv
judges it (fidelity.judgement: a point whose run, reference or floor run did not finish is left
out), then the points as one family and pooled (fidelity.series), written to
`fidelity/families/<series>.json`. Each point's card reads its own verdict there, so a card
takes one file, not every other point's three (which made a series' card inputs grow with the
square of its points)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...atomic import write_json
from ...fidelity.agreement import NO_VERDICT
from ...fidelity.judgement import Run, judge_runs
from ...fidelity.series import SeriesPoint, SeriesVerdict, judge_series
from ..record_index import files_of, load_cell


def run_of(metrics_path: str | Path | None) -> Run | None:
    """A cell's run from its metrics.json and the records beside it, as the one reader
    (record_index.load_cell) gives them; None: no such cell."""
    if not metrics_path:
        return None
    files = files_of(metrics_path)
    return Run.of(*load_cell(files.metrics, files.requests))


def family_verdict(
    series: str, members: Sequence[Mapping[str, Any]], paths: Mapping[str, str]
) -> SeriesVerdict:
    """The series' points (each member's cell, name and input key, in load order) judged from
    the files the inputs name (`<key>`, `<key>_reference`, `<key>_floor`): like fidelity.csv,
    only the points the one judgement gives a verdict."""
    points = []
    for member in members:
        key = member["input"]
        mine, reference = run_of(paths.get(key)), run_of(paths.get(f"{key}_reference"))
        if mine is None or reference is None:
            continue
        judgement = judge_runs(mine, reference, run_of(paths.get(f"{key}_floor")))
        if judgement.verdict == NO_VERDICT:
            continue
        points.append(
            SeriesPoint(member["cell"], member["label"], judgement.agreement, judgement.floor)
        )
    return judge_series(points, series=series)


def write_family(
    series: str, members: Sequence[Mapping[str, Any]], paths: Mapping[str, str], out: str | Path
) -> SeriesVerdict:
    verdict = family_verdict(series, members, paths)
    write_json(out, verdict.to_dict())
    return verdict


def read_family(path: str | Path) -> SeriesVerdict:
    return SeriesVerdict.from_dict(json.loads(Path(path).read_text()))
