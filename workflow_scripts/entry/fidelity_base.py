"""Rule `fidelity_base`: the reference quant's logits over the text and its record, or a
failed record that says why."""

import json

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.fidelity.kld import measure_base, recorded
from workflow_scripts.fidelity.kld_plan import KldStep

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    step = KldStep.from_dict(json.loads(sm.params.step))
    inputs, outputs = sm.input, sm.output
    recorded(
        step,
        lambda: measure_base(
            step, inputs.text, inputs.engine, inputs.weights, outputs.logits, outputs.record
        ),
        outputs.record,
        sm.params.failures_dir,
        logits=outputs.logits,
    )
