from workflow_scripts.entry import stderr_to_log
from workflow_scripts.outputs.front_page import overview_from_snakemake

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    overview_from_snakemake(sm)
