"""The series' server rule's body, run as `python -m workflow_scripts.entry.series_server`.

A `shell:` rule, not a `script:` one: Snakemake ends a service job by terminating the process its
shell() started, and a script job's process is not one it keeps (Snakemake 9.27: the server ran
on after its last point, and the run never ended).
"""

import sys

from workflow_scripts.cell.jobs import serve_series_from_argv
from workflow_scripts.entry import stderr_to_log
from workflow_scripts.process.server import Terminated

if __name__ == "__main__":
    log, argv = sys.argv[1], sys.argv[2:]
    try:
        with stderr_to_log(log):
            serve_series_from_argv(argv)
    except Terminated:  # how a service ends: Snakemake's SIGTERM once its last point is done
        sys.exit(0)
