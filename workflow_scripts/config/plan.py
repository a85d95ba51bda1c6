"""Print each cell's exact server and client command lines for a config, running nothing.

    python -m workflow_scripts.plan --configfile configs/gb10-gemma4.yaml [--cell ID] [--json]

Weights already fetched (their manifests under `<results_dir>/weights/`) are shown at their real
paths and resolved revisions; the rest as placeholders, explained under the command. The server
port is the engine's usual one (as a run uses it when free); a run that finds it taken picks
another and records the command it really ran in the cell's metrics.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engines import adapter_for
from ..engines.command import (
    ServerCommand,
    cell_server_command,
    cell_weights,
    request_fields,
    shell_join,
    with_env,
)
from ..loadgen.command import client_argv
from ..redact import redact
from ..vocabulary import Cell, ConfigError, Status
from .matrix import build_cells, build_searches, load_config_file
from .probes import Search, probe_of
from .search import load_label
from .sweeps import launch_cell, shared_series


@dataclass
class CellPlan:
    cell: str
    blocked: str | None = None
    server: list[str] = field(default_factory=list)
    client: list[str] = field(default_factory=list)
    teardown: list[str] | None = None
    notes: list[str] = field(default_factory=list)
    reference: dict[str, Any] = field(default_factory=dict)


def _manifest(results_dir: Path, key: str | None) -> dict[str, Any] | None:
    if not key:
        return None
    path = results_dir / "weights" / f"{key}.json"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return None if manifest.get("status") == Status.FAILED else manifest


def _engine_info(results_dir: Path, engine: str) -> dict[str, Any]:
    try:
        info = json.loads((results_dir / "engines" / f"{engine}.json").read_text())
    except (OSError, ValueError):
        return {}
    return {} if info.get("status") == Status.FAILED else info


def client_command(cell: Cell, command: ServerCommand, results_dir: Path) -> list[str]:
    """The standalone load generator's command line for this cell's workload."""
    return client_argv(
        cell.workload_spec,
        command.base_url,
        str(results_dir / "cells" / cell.id),
        command.served_model,
        request_fields(cell),
    )


def plan_cell(cell: Cell, results_dir: Path, launch: Cell | None = None) -> CellPlan:
    """`launch`: for a point of a series that shares its server, the point the series' one
    server start is made for (its command is the one this point runs on)."""
    plan = CellPlan(cell=cell.id, blocked=cell.blocked, reference=dict(cell.reference))
    if cell.blocked:
        return plan
    adapter = adapter_for(cell.engine_kind)
    server_cell = launch or cell
    weights, drafter = cell_weights(
        server_cell,
        _manifest(results_dir, cell.weights_key),
        _manifest(results_dir, cell.drafter_weights_key),
    )
    command = cell_server_command(
        server_cell,
        adapter,
        _engine_info(results_dir, cell.engine),
        weights,
        drafter,
        adapter.container_port(server_cell),
    )
    plan.server = redact(with_env(command.shown_env, command.argv))
    plan.client = client_command(cell, command, results_dir)
    plan.teardown = command.stop_argv
    plan.notes = [f"{name} = {meaning}" for name, meaning in command.placeholders.items()]
    if cell.sweep:
        point = f"point {cell.sweep.axis} = {cell.sweep.value:g} of series {cell.sweep.series}"
        plan.notes.append(
            f"{point}: on the series' one server start (made for {server_cell.id})"
            if launch
            else f"{point}: a server of its own"
        )
    guard = cell.run.context_guard
    per_slot = adapter.per_slot_context(server_cell)
    if per_slot is not None:
        plan.notes.append(
            f"per-slot context {per_slot} tokens; context_guard '{guard}'"
            + (" sizes -c at run time" if guard == "size" else "")
        )
    return plan


def search_first_probes(searches: dict[str, Search]) -> list[tuple[Cell, str]]:
    """Each search's first probe (its min), with the probes that follow while each passes: the
    rest depends on the verdicts, so the plan names them and does not guess further."""
    out = []
    for search in searches.values():
        spec = search.settings
        ladder, load = [], spec.normal(spec.min)
        while len(ladder) < 4:
            ladder.append(load_label(spec, load))
            if load >= spec.max:
                break
            load = spec.clamp(load * 2)
        note = (
            f"first probe of the search {search.series} ({spec.text}; goal {search.slo.text}): "
            f"then {' -> '.join(ladder[1:]) or 'done'} while each passes, bisecting once one "
            "does not (each probe a fresh server of its own)"
        )
        out.append((search.probe((spec.normal(spec.min), 0)), note))
    return out


def render(plans: list[CellPlan]) -> str:
    lines = []
    for plan in plans:
        lines.append(f"# cell {plan.cell}")
        if plan.blocked:
            lines += [f"# blocked: {plan.blocked}", ""]
            continue
        lines += ["# server", shell_join(plan.server), "# client", shell_join(plan.client)]
        if plan.teardown:
            lines += ["# teardown", shell_join(plan.teardown)]
        lines += [f"#   {note}" for note in plan.notes]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configfile", default="config.yaml")
    parser.add_argument("--cell", action="append", help="only these cell ids (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON object per cell")
    args = parser.parse_args(argv)
    try:
        config = load_config_file(args.configfile)
        cells = build_cells(config)
        searches = build_searches(config)
    except ConfigError as exc:
        print(f"{args.configfile}: {exc}", file=sys.stderr)
        return 2
    first_probes = {probe.id: (probe, note) for probe, note in search_first_probes(searches)}
    if args.cell:
        for cell_id in args.cell:  # a probe further along a search, named by its id
            found = probe_of(searches, cell_id)
            if found and cell_id not in first_probes:
                first_probes[cell_id] = (found[0].probe(found[1]), "a probe of its search")
        unknown = sorted(set(args.cell) - {c.id for c in cells} - set(first_probes))
        if unknown:
            print(f"unknown cell ids: {', '.join(unknown)}", file=sys.stderr)
            return 2
        cells = [c for c in cells if c.id in args.cell]
        first_probes = {k: v for k, v in first_probes.items() if k in args.cell}
    results_dir = Path(config["results_dir"])
    launches = {name: launch_cell(points) for name, points in shared_series(cells).items()}
    plans = [
        plan_cell(cell, results_dir, launches.get(cell.sweep.series) if cell.sweep else None)
        for cell in cells
    ]
    for probe, note in first_probes.values():
        plans.append(plan_cell(probe, results_dir))
        plans[-1].notes.append(note)
    if args.json:
        for plan in plans:
            print(json.dumps(plan.__dict__, sort_keys=True))
    else:
        print(render(plans))
    return 0


if __name__ == "__main__":
    sys.exit(main())
