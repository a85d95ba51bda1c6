from workflow_scripts.entry import stderr_to_log
from workflow_scripts.run_cell import run_cell_from_snakemake

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    run_cell_from_snakemake(sm)
