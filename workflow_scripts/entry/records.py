"""Rule `records`: the index of every cell's record files."""

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.outputs.record_index import write_index

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    write_index(sm.output.records, list(sm.input.metrics))
