"""Rule `cell`: one cell's benchmark (or a blocked cell's stub) into its folder."""

import json
from pathlib import Path

from workflow_scripts.cell.jobs import run_cell_job
from workflow_scripts.entry import stderr_to_log
from workflow_scripts.vocabulary import Cell

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    run_cell_job(
        Cell.from_dict(json.loads(sm.params.cell)),
        Path(sm.output.metrics).parent,
        sm.params.failures_dir,
        sm.config.get("checks"),
        engine=sm.input.get("engine"),
        weights=sm.input.get("weights"),
        drafter_weights=sm.input.get("drafter_weights"),
        server=sm.input.get("server"),
        floor_reference=sm.input.get("floor_reference"),
    )
