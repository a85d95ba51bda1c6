"""The rules' bodies: `entry/<rule>.py` is the `script:` of rule `<rule>` (`series_server.py`
the module its `shell:` line runs). Each reads the `snakemake` object (inputs, outputs, params,
log) and calls pure functions of workflow_scripts with plain values, with stderr going to the
rule's log (`stderr_to_log`); nothing below `entry/` sees the Snakemake object.

Rules: `engine`, `weights`, `cell`, `series_server`, `cell_slo` (a checkpoint), `card`,
`records`, `aggregate`, `comparisons`, `summary_plots`, `concurrency_figure`,
`reference_figure`, `sweeps`, `slo_tables`, `fidelity`, `fidelity_text`, `fidelity_base`,
`fidelity_kld`, `fidelity_family`, `overview`, `html_report`."""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Iterator
from typing import TextIO


@contextlib.contextmanager
def stderr_to_log(path: str) -> Iterator[TextIO]:
    """stderr into the rule's log. What escapes (a full disk, SIGTERM, Ctrl-C) is written to the
    log first, then raised with the real stderr back, so Snakemake's output says why the job
    failed instead of Python's "lost sys.stderr"."""
    with open(path, "w") as log:
        sys.stderr = log
        try:
            yield log
        except BaseException:
            with contextlib.suppress(Exception):  # the log's own disk may be the full one
                traceback.print_exc(file=log)
                log.flush()
            raise
        finally:
            sys.stderr = sys.__stderr__
