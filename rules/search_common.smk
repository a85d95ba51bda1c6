# The helpers of rules/search.smk (latency goals, docs/slo.md): the goal files, each rule's
# inputs, and the walk of each searched series, all calling into workflow_scripts.
from snakemake.exceptions import IncompleteCheckpointException

from workflow_scripts.outputs.slo_cells import goal_workload
from workflow_scripts.outputs.search_files import (
    goal_path,
    goals_of,
    probe_cells,
    read_verdict,
    search_path,
    walked_probes,
    write_goal_files,
)

GOALS = f"{RESULTS}/goals"
# Written at parse time, each only when it changes: a changed goal reruns the judgements and the
# tables (an input newer than their output), never a cell (no cell reads it).
GOAL_SLOS = goals_of(CONFIG)
write_at_parse("the goal files", write_goal_files, GOALS, GOAL_SLOS, SEARCHES.values())


def run_end_cells():
    """What the end-of-run lines show: the matrix's cells, then every probe a search has run."""
    return [*CELLS, *probe_cells(f"{RESULTS}/cells", SEARCHES.values())]


@job_function
def goal_input(wildcards):
    """The goal of the workload a cell comes from (a probe's or a sweep point's: its own)."""
    return str(goal_path(GOALS, goal_workload(cell_of(wildcards.cell))))


@job_function
def card_goal(wildcards):
    """The goal a cell's card judges it against, where its workload has one."""
    cell = cell_of(wildcards.cell)
    return {"goal": goal_input(wildcards)} if goal_workload(cell) in GOAL_SLOS else {}


def all_goal_files():
    return [str(goal_path(GOALS, workload)) for workload in GOAL_SLOS]


def checkpoint_verdict(cell):
    """A probe's verdict through its checkpoint; None while it is not judged."""
    try:
        return read_verdict(checkpoints.cell_slo.get(cell=cell).output.slo)
    except IncompleteCheckpointException:
        return None


@job_function
def slo_table_inputs(wildcards):
    """Each series' search file and the judgements of the probes its walk has reached: every
    series walks at once (each stops at its own next probe), not one after another. Plain
    paths, no `checkpoint_target` flag: Snakemake skips the is-the-output-older check of a job
    with a flagged input and prunes what it would need, so flagged probes left the tables stale
    after a changed goal and never ran a probe after a failed one (measured; the tests).
    """
    inputs = {"searches": [str(search_path(GOALS, s)) for s in SEARCHES], "probes": []}
    for search in SEARCHES.values():
        walked = walked_probes(
            search, RESULTS, GOALS, checkpoint_verdict, workflow.dryrun
        )
        inputs["probes"] += [f"{RESULTS}/cells/{cell}/slo.json" for cell in walked]
    return inputs


def search_outputs():
    """What the targets gain when the matrix has a search (none without one)."""
    if not SEARCHES:
        return []
    return [
        f"{RESULTS}/summary/slo.csv",
        f"{RESULTS}/summary/slo.md",
        f"{RESULTS}/summary/slo_drafter.csv",
        f"{RESULTS}/summary/slo_drafter.md",
        f"{RESULTS}/summary/slo.html",
        f"{RESULTS}/summary/slo_search.png",
    ]


def search_report_inputs():
    """What the report shows of the searches: the tables' page and the figure."""
    return [path for path in search_outputs() if path.endswith((".html", ".png"))]
