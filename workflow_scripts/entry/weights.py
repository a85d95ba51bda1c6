"""Rule `weights`: a weights entry fetched, converted or made, and its manifest, or a failed
stamp that says why."""

import json
import os
import traceback

from workflow_scripts.cell.failures import write_failed_stamp
from workflow_scripts.entry import stderr_to_log
from workflow_scripts.weights.fetch import StepInputs, fetch_weights

sm = snakemake  # noqa: F821  (injected by Snakemake)
# Progress bars would fill the log with carriage returns; the hub module logs a line per fetch.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
with stderr_to_log(sm.log[0]):
    try:
        inputs = StepInputs(sm.input.get("source"), sm.input.get("engine"))
        fetch_weights(json.loads(sm.params.spec), sm.output.manifest, inputs)
    except Exception as exc:
        traceback.print_exc()
        write_failed_stamp(
            sm.output.manifest, sm.params.failures_dir, f"weights-{sm.wildcards.weights}", exc
        )
