"""Rule `fidelity`: each compared cell against its reference, the frontier, the figure."""

import json

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.fidelity.pairs import FidelitySettings
from workflow_scripts.outputs.fidelity.files import write_fidelity
from workflow_scripts.outputs.record_index import read_index
from workflow_scripts.vocabulary import Cell

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    write_fidelity(
        read_index(sm.input.records),
        [Cell.from_dict(cell) for cell in json.loads(sm.params.cells)],
        list(sm.input.kld),
        FidelitySettings.from_dict(json.loads(sm.params.fidelity)),
        dict(sm.output.items()),
    )
