"""Rule `comparisons`: engine against engine, quant against quant."""

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.outputs.aggregate import cells_from_params
from workflow_scripts.outputs.cell_pairs import indexed_comparisons, write_comparisons

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    table = indexed_comparisons(sm.input.records, cells_from_params(sm.params.cells))
    write_comparisons(table, dict(sm.output.items()))
