"""Rule `concurrency_figure`: decode tok/s against concurrency."""

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.outputs.aggregate import cells_from_params, draw_summary_figures

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    draw_summary_figures(
        sm.input.records, cells_from_params(sm.params.cells), dict(sm.output.items())
    )
