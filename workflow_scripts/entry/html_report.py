"""Rule `html_report`: Snakemake's self-contained HTML report, built by the run's last job."""

import sys

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.outputs.report_html import write_report

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    write_report(
        sm.params.snakefile, dict(sm.config), sm.output.html, sm.input.stylesheet, sys.stderr
    )
