import sys

from workflow_scripts.report_html import report_from_snakemake

sm = snakemake  # noqa: F821  (injected by Snakemake)
with open(sm.log[0], "w") as log:
    sys.stderr = log
    report_from_snakemake(sm)
