import sys

from workflow_scripts.run_cell import run_cell_from_snakemake

sm = snakemake  # noqa: F821  (injected by Snakemake)
with open(sm.log[0], "w") as log:
    sys.stderr = log
    run_cell_from_snakemake(sm)
