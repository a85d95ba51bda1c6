"""Rule `overview`: the report's front page."""

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.outputs.front_page import write_overview

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    write_overview(
        sm.output.overview,
        sm.input.index,
        list(sm.input.figures),
        list(sm.input.get("answers", [])),
    )
