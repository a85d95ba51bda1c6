from workflow_scripts.cell.jobs import run_cell_from_snakemake
from workflow_scripts.entry import stderr_to_log

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    run_cell_from_snakemake(sm)
