"""Rule `engine`: an engine provisioned (built, installed or pulled) and its stamp, or a
failed stamp that says why."""

import json
import traceback

from workflow_scripts.cell.failures import write_failed_stamp
from workflow_scripts.engines.provision import provision_to
from workflow_scripts.entry import stderr_to_log

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    try:
        provision_to(sm.wildcards.engine, json.loads(sm.params.spec), sm.output.stamp, sm.log[0])
    except Exception as exc:
        traceback.print_exc()
        write_failed_stamp(
            sm.output.stamp,
            sm.params.failures_dir,
            f"engine-{sm.wildcards.engine}",
            exc,
            {"attempts": getattr(exc, "attempts", [])},
        )
