"""The walk of a latency-goal search over its probes' verdicts (no pandas): what the tables
rule's input function runs while Snakemake builds the DAG, each probe's verdict read from its
settled judgement or asked of its checkpoint, the walk stopping at the first probe without one
(which becomes an input, so its cell and checkpoint are scheduled)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ...config.probes import Search
from ...slo.search import ProbeKey, SearchSettings, next_probe
from ...verdicts.verdict import Verdict
from .goals import goal_path
from .judgement import heal_probe, settled_verdict


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
