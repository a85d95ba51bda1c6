"""Rule `fidelity_kld`: a quant's KL divergence against the reference's logits, or a failed
record that says why."""

import json
import traceback

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.fidelity.kld import measure_kld, write_failure
from workflow_scripts.fidelity.kld_plan import KldStep

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    step = KldStep.from_dict(json.loads(sm.params.step))
    try:
        measure_kld(
            step,
            sm.input.text,
            sm.input.base,
            sm.input.logits,
            sm.input.engine,
            sm.input.weights,
            sm.output.record,
        )
    except Exception as exc:
        traceback.print_exc()
        write_failure(step, sm.output.record, sm.params.failures_dir, exc)
