import json
import sys
import traceback

from workflow_scripts.failures import write_failed_stamp
from workflow_scripts.weights import fetch_weights

sm = snakemake  # noqa: F821  (injected by Snakemake)
with open(sm.log[0], "w") as log:
    sys.stderr = log
    try:
        fetch_weights(json.loads(sm.params.spec), sm.output.manifest)
    except Exception as exc:
        traceback.print_exc()
        write_failed_stamp(
            sm.output.manifest, sm.params.failures_dir, f"weights-{sm.wildcards.weights}", exc
        )
