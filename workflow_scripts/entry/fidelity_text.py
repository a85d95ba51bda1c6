"""Rule `fidelity_text`: the fixed text every KL divergence step reads (ShareGPT V3
conversations, cut to a fixed length)."""

import json

from workflow_scripts.atomic import write_text
from workflow_scripts.entry import stderr_to_log
from workflow_scripts.fidelity.kld import fidelity_text
from workflow_scripts.fidelity.kld_plan import KldSettings

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    write_text(sm.output.text, fidelity_text(KldSettings(**json.loads(sm.params.settings))))
