"""The series' server rule's body, run as `python -m workflow_scripts.entry.series_server`.

A `shell:` rule, not a `script:` one: Snakemake ends a service job by terminating the process its
shell() started, and a script job's process is not one it keeps (on Snakemake 9.27 a `script:`
server runs on after its last point, and the run never ends).
"""

import argparse
import json
import sys
from pathlib import Path

from workflow_scripts.cell.jobs import serve_series_job
from workflow_scripts.entry import stderr_to_log
from workflow_scripts.process.server import Terminated
from workflow_scripts.vocabulary import Cell


def serve(argv: list[str]) -> None:
    """The rule's command line (its shell line gives the paths) to `serve_series_job`."""
    parser = argparse.ArgumentParser(prog="series_server")
    parser.add_argument("--cell-file", required=True, help="the launch point's cell (JSON)")
    parser.add_argument("--server", required=True, help="the record (the service output)")
    parser.add_argument("--engine", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--drafter-weights")
    parser.add_argument("--failures-dir", required=True)
    args = parser.parse_args(argv)
    serve_series_job(
        Cell.from_dict(json.loads(Path(args.cell_file).read_text())),
        Path(args.server),
        args.engine,
        args.weights,
        args.drafter_weights,
        args.failures_dir,
    )


if __name__ == "__main__":
    log, argv = sys.argv[1], sys.argv[2:]
    try:
        with stderr_to_log(log):
            serve(argv)
    except Terminated:  # how a service ends: Snakemake's SIGTERM once its last point is done
        sys.exit(0)
