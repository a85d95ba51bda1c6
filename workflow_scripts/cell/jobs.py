"""The bodies of the cell rule and the series' server rule: settings from params, manifests from
inputs, then cell.run (a cell, or a point on its own server) or cell.shared (a point on its
series' server, and that server's service job)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..process.machine_use import Thresholds
from ..terminal import say
from ..vocabulary import Cell, Status
from .record import write_blocked
from .run import CellInputs, run_cell
from .shared import SharedServer, serve_series


def _inputs(sm, cell: Cell, out: Path, series_record: Path | None = None) -> CellInputs:
    drafter = sm.input.get("drafter_weights")
    return CellInputs(
        cell=cell,
        out_dir=out,
        engine_info=json.loads(Path(sm.input.engine).read_text()),
        weights_manifest=json.loads(Path(sm.input.weights).read_text()),
        drafter_manifest=json.loads(Path(drafter).read_text()) if drafter else None,
        failures_dir=Path(sm.params.failures_dir),
        # read from the config, not params: a threshold only decides a flag, and editing one
        # must not rerun a measurement
        thresholds=Thresholds.from_config(sm.config.get("checks")),
        series_record=series_record,
    )


def run_cell_from_snakemake(sm) -> None:
    """The cell rule's body."""
    cell = Cell.from_dict(json.loads(sm.params.cell))
    out = Path(sm.output.metrics).parent
    if cell.blocked:
        write_blocked(cell, out)
        return
    server = sm.input.get("server")
    inputs = _inputs(sm, cell, out, Path(server) if server else None)
    result = run_cell(inputs, SharedServer if server else None)
    if result["status"] == Status.DONE:
        say(f"{cell.id}: done, {result['decode_tok_s']:.1f} decode tok/s")
    else:
        reason = (result.get("reason") or "no reason given").splitlines()[0][:300]
        say(f"{cell.id}: failed: {reason}")


def serve_series_from_argv(argv: list[str]) -> None:
    """The series' server rule's body (entry/series_server.py says why it takes a command
    line): a service that runs until Snakemake ends it."""
    parser = argparse.ArgumentParser(prog="series_server")
    parser.add_argument("--cell-file", required=True, help="the launch point's cell (JSON)")
    parser.add_argument("--server", required=True, help="the record (the service output)")
    parser.add_argument("--engine", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--drafter-weights")
    parser.add_argument("--failures-dir", required=True)
    args = parser.parse_args(argv)
    record = Path(args.server)
    out = record.parent / record.stem  # the series' own folder: context sizing, leftovers
    out.mkdir(parents=True, exist_ok=True)
    inputs = CellInputs(
        cell=Cell.from_dict(json.loads(Path(args.cell_file).read_text())),
        out_dir=out,
        engine_info=json.loads(Path(args.engine).read_text()),
        weights_manifest=json.loads(Path(args.weights).read_text()),
        drafter_manifest=(
            json.loads(Path(args.drafter_weights).read_text()) if args.drafter_weights else None
        ),
        failures_dir=Path(args.failures_dir),
    )
    serve_series(inputs, record)
