import sys

from workflow_scripts.aggregate import overview_from_snakemake

sm = snakemake  # noqa: F821  (injected by Snakemake)
with open(sm.log[0], "w") as log:
    sys.stderr = log
    overview_from_snakemake(sm)
