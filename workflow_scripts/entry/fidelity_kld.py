"""Rule `fidelity_kld`: a quant's KL divergence against the reference's logits, or a failed
record that says why."""

import json

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.fidelity.kld import measure_kld, recorded
from workflow_scripts.fidelity.kld_plan import KldStep

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    step = KldStep.from_dict(json.loads(sm.params.step))
    inputs = sm.input
    recorded(
        step,
        lambda: measure_kld(
            step,
            inputs.text,
            inputs.base,
            inputs.logits,
            inputs.engine,
            inputs.weights,
            sm.output.record,
        ),
        sm.output.record,
        sm.params.failures_dir,
    )
