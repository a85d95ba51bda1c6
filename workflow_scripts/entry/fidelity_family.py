"""Rule `fidelity_family`: a sweep series' fidelity verdicts as one family, for its cards."""

import json

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.outputs.fidelity.family import write_family

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    write_family(
        sm.wildcards.series,
        json.loads(sm.params.members),
        dict(sm.input.items()),
        sm.output.family,
    )
