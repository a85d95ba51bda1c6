"""Rule `card`: a cell's result card (Markdown and HTML) and its two figures."""

import json

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.outputs.card.files import FidelityInputs, write_card
from workflow_scripts.outputs.record_index import files_of
from workflow_scripts.vocabulary import Cell

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    files = files_of(sm.input.metrics)  # the rule names metrics.json, for the cell's records
    write_card(
        Cell.from_dict(json.loads(sm.params.cell)),
        files.metrics,
        files.requests,
        files.memory,
        dict(sm.output.items()),
        goal=sm.input.get("goal"),
        fidelity=FidelityInputs(
            json.loads(sm.params.fidelity),
            sm.input.get("fidelity_reference"),
            sm.input.get("fidelity_floor"),
            sm.input.get("kld"),
            sm.input.get("fidelity_family"),
        ),
    )
