"""Rule slo_tables: slo.csv/md, slo_drafter.csv/md, their HTML page and the figure, from the
series' search files (the probes are read from the cells folder beside them)."""

import json

from workflow_scripts.entry import stderr_to_log
from workflow_scripts.outputs.plots import save_figure
from workflow_scripts.outputs.report_html import write_tables_html
from workflow_scripts.outputs.search.figure import search_figure
from workflow_scripts.outputs.search.outcome import read_searches
from workflow_scripts.outputs.search.tables import DRAFTER_GOAL_INTRO, write_slo_tables

sm = snakemake  # noqa: F821  (injected by Snakemake)
with stderr_to_log(sm.log[0]):
    searches = read_searches(sm.input.searches, sm.params.cells_dir)
    slo, drafter = write_slo_tables(searches, sm.output, json.loads(sm.params.prices))
    write_tables_html(
        sm.output.slo_html,
        "Latency goals",
        [
            ("Largest load served within the goal", slo, ""),
            ("The drafter at the goal", drafter, DRAFTER_GOAL_INTRO),
        ],
    )
    save_figure(search_figure(searches), sm.output.figure)
