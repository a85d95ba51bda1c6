"""Rule `aggregate`: the summary, index, spec-gain and energy tables."""

import json

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.outputs.aggregate import cells_from_params, write_summary

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    write_summary(
        sm.input.records,
        cells_from_params(sm.params.cells),
        list(sm.input.get("goals", [])),
        dict(sm.output.items()),
        json.loads(sm.params.prices),  # each cell's price (config `cost`), or null
    )
