"""The work of the cell rule and the series' server rule, from plain values: a cell's settings,
the paths of its stamps, then cell.run (a cell, or a point on its own server) or cell.shared (a
point on its series' server, and that server's service job). The rules' scripts
(`entry/cell.py`, `entry/series_server.py`) unpack what Snakemake hands them and call these."""

from __future__ import annotations

import json
from pathlib import Path

from ..process.machine_use import Thresholds
from ..terminal import say
from ..vocabulary import Cell, Status
from .record import write_blocked
from .run import CellInputs, run_cell
from .shared import SharedServer, serve_series

DEFAULT_THRESHOLDS = Thresholds()


def read_manifest(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def read_run(path: str | Path) -> dict:
    """A cell's metrics.json as a status: one that does not parse is a run that did not
    finish, saying so."""
    try:
        data = json.loads(Path(path).read_text())
        why = None if isinstance(data, dict) else "holds no object"
    except (OSError, ValueError) as error:
        why = f"does not parse ({type(error).__name__}: {error})"
    if why is None:
        return data
    return {"cell": Path(path).parent.name, "status": Status.FAILED, "reason": f"{path} {why}"}


def cell_inputs(
    cell: Cell,
    out_dir: Path,
    engine: str | Path,
    weights: str | Path,
    drafter_weights: str | Path | None,
    failures_dir: str | Path,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    series_record: Path | None = None,
    floor_reference: str | Path | None = None,
) -> CellInputs:
    """What a cell's run takes, its engine's and weights' stamps (and a floor run's
    reference's metrics.json) read."""
    return CellInputs(
        cell=cell,
        out_dir=out_dir,
        engine_info=read_manifest(engine),
        weights_manifest=read_manifest(weights),
        drafter_manifest=read_manifest(drafter_weights) if drafter_weights else None,
        failures_dir=Path(failures_dir),
        thresholds=thresholds,
        series_record=series_record,
        floor_reference=read_run(floor_reference) if floor_reference else None,
    )


def run_cell_job(
    cell: Cell,
    out_dir: Path,
    failures_dir: str | Path,
    checks: dict | None,
    engine: str | Path | None = None,
    weights: str | Path | None = None,
    drafter_weights: str | Path | None = None,
    server: str | Path | None = None,
    floor_reference: str | Path | None = None,
) -> None:
    """The cell rule's work: a blocked cell's stub (it has no stamps), else its run, on its
    series' server when `server` names that server's record (a floor run: `floor_reference`
    its reference's metrics.json); one line says how it went.
    `checks` is the config's (not a param: a threshold only decides a flag, and editing one
    must not rerun a measurement)."""
    if cell.blocked:
        write_blocked(cell, out_dir)
        return
    if engine is None or weights is None:
        raise ValueError(f"{cell.id}: the cell is not blocked, yet has no engine or weights stamp")
    inputs = cell_inputs(
        cell,
        out_dir,
        engine,
        weights,
        drafter_weights,
        failures_dir,
        Thresholds.from_config(checks),
        Path(server) if server else None,
        floor_reference,
    )
    result = run_cell(inputs, SharedServer if server else None)
    if result["status"] == Status.DONE:
        say(f"{cell.id}: done, {result['decode_tok_s']:.1f} decode tok/s")
    else:
        reason = (result.get("reason") or "no reason given").splitlines()[0][:300]
        say(f"{cell.id}: failed: {reason}")


def serve_series_job(
    cell: Cell,
    record: Path,
    engine: str | Path,
    weights: str | Path,
    drafter_weights: str | Path | None,
    failures_dir: str | Path,
) -> None:
    """The series' server rule's work: start the server of `cell` (the series' launch point),
    write its record once it answers, and serve until Snakemake ends the service job."""
    out = record.parent / record.stem  # the series' own folder: context sizing, leftovers
    out.mkdir(parents=True, exist_ok=True)
    serve_series(cell_inputs(cell, out, engine, weights, drafter_weights, failures_dir), record)
