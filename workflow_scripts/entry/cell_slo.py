"""Checkpoint cell_slo: a cell judged against its workload's goal (`slo.json`)."""

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.outputs.search.judgement import judge_files

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    judge_files(sm.input.goal, sm.input.metrics, sm.input.requests, sm.output.slo)
