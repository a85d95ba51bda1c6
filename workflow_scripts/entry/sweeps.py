"""Rule `sweeps`: the sweep tables (sweeps, pareto, spec_gain_sweep, spec_crossover,
energy_frontier) and figures."""

import json

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.outputs.aggregate import cells_from_params
from workflow_scripts.outputs.sweeps.files import write_sweep_outputs

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    write_sweep_outputs(
        sm.input.records,
        cells_from_params(sm.params.cells),
        json.loads(sm.params.gpus),  # each point's: the cells this rule reads
        sm.output,
        json.loads(sm.params.prices),  # each cell's price (config `cost`), or null
    )
