# The rules' job functions: each a line that asks GRAPH, the DAG of the config
# (workflow_scripts.dag; not `DAG`, a name Snakemake's workflow uses), built once from the config
# validated against schemas/config.schema.yaml: every error names its key before anything runs.
import os
import sys

# This checkout's workflow_scripts, installed or not. Snakemake hands this search path on to
# every script job, which is how jobs in the rules' conda env (envs/bench.yaml: dependencies
# only) find the code of the workflow they belong to.
sys.path.insert(0, workflow.basedir)

from snakemake.exceptions import IncompleteCheckpointException, WorkflowError
from snakemake.settings.types import DeploymentMethod

from workflow_scripts.cell.interrupt import (
    forward_sigterm_to_jobs,
    sigterm_never_waits_on_itself,
)
from workflow_scripts.cell.results_dir import (
    ResultsDirLocked,
    acquire_results_lock,
    release_results_lock,
)
from workflow_scripts.dag import UnknownCell, build_dag
from workflow_scripts.job_functions import job_function
from workflow_scripts.outputs.run_end import print_run_end
from workflow_scripts.outputs.search_files import read_verdict, walked_probes
from workflow_scripts.vocabulary import ConfigError

try:
    GRAPH = build_dag(config)
except ConfigError as error:
    raise WorkflowError(str(error))
GRAPH.write_parse_files()
RESULTS = GRAPH.results
FAILURES = GRAPH.failures
CELL_RECORDS = GRAPH.cell_records
CELL_RULE_RESOURCES = GRAPH.cell_rule_resources()
SERIES_RULE_RESOURCES = GRAPH.series_rule_resources()

# SIGTERM ends a run or a dry run that is still planning (workflow_scripts.cell.interrupt says why
# Snakemake alone could hang there); set before Snakemake builds its scheduler.
sigterm_never_waits_on_itself()

# The Python the series' server (a shell rule) runs workflow_scripts with: the rules' conda
# env's under --use-conda, else the one running Snakemake (a bare venv need not be on PATH).
# Handed over in the environment, not as a param: the server job must have no param that can
# change (workflow_scripts.cell.series.write_series_files says why).
os.environ["LLMBENCH_PYTHON"] = (
    "python"
    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    else sys.executable
)
os.environ["LLMBENCH_WORKFLOW"] = workflow.basedir


envvars:
    "LLMBENCH_PYTHON",
    "LLMBENCH_WORKFLOW",


# SIGTERM to snakemake tears the running cells' servers down now (Snakemake alone would wait
# for them to finish); the interrupted cells write no result and are redone next run. One run at
# a time measures into a results_dir (workflow_scripts.cell.results_dir): a second refuses here.
onstart:
    try:
        acquire_results_lock(RESULTS)
    except ResultsDirLocked as error:
        raise WorkflowError(str(error))
    forward_sigterm_to_jobs()


# The terminal ends with the result: a line per cell and per probe of a search, how many failed,
# where the report is. Snakemake calls neither handler for a dry run nor when there is nothing
# to be done.
onsuccess:
    release_results_lock(RESULTS)
    print_run_end(RESULTS, GRAPH.run_end_cells())


onerror:
    if release_results_lock(RESULTS):
        print_run_end(RESULTS, GRAPH.run_end_cells())


# A cell id is its five names joined by `__` (workflow_scripts.config.matrix.cell_id). The
# constraint says only what an id looks like, not which ids exist: a 200-way alternative of
# every id made a 200-cell dry run cost a third more. cell_inputs names an unknown id.
wildcard_constraints:
    cell="[A-Za-z0-9._-]+",
    weights="[A-Za-z0-9._-]+__[A-Za-z0-9._-]+",
    engine="[A-Za-z0-9._-]+",
    series="[A-Za-z0-9._-]+",


# Every function the rules hand Snakemake per job is a @job_function: its signature looked up
# once, not at each of its calls (workflow_scripts/job_functions.py).


def cell_of(cell_id):
    try:
        return GRAPH.cell_of(cell_id)
    except UnknownCell as error:
        raise WorkflowError(str(error))


@job_function
def weights_spec(wildcards):
    return GRAPH.weights_spec(wildcards.weights)


@job_function
def weights_inputs(wildcards):
    return GRAPH.weights_inputs(wildcards.weights)


@job_function
def weights_failures(wildcards):
    return GRAPH.failed_attempts.get(f"weights-{wildcards.weights}", 0)


@job_function
def engine_spec(wildcards):
    return GRAPH.engine_spec(wildcards.engine)


@job_function
def engine_failures(wildcards):
    return GRAPH.failed_attempts.get(f"engine-{wildcards.engine}", 0)


@job_function
def cell_inputs(wildcards):
    inputs = GRAPH.inputs_of(cell_of(wildcards.cell))
    series = GRAPH.series_of(wildcards.cell)
    if series:
        # ancient: a new server start never reruns the points that ran on an earlier one
        inputs["server"] = ancient(GRAPH.series_record(series))
    return inputs


@job_function
def cell_threads(wildcards):
    """A point of a shared series holds no core: Snakemake adds up the threads of a group's
    jobs that start together, and its points start together (they take turns on the server).
    """
    return 0 if GRAPH.series_of(wildcards.cell) else 1


@job_function
def cell_group(wildcards):
    series = GRAPH.series_of(wildcards.cell)
    return f"series-{series}" if series else None


@job_function
def cell_settings(wildcards):
    cell_of(wildcards.cell)  # an unknown id: named
    return GRAPH.cell_settings(wildcards.cell)


@job_function
def cell_failures(wildcards):
    return GRAPH.failed_attempts.get(wildcards.cell, 0)


@job_function
def series_inputs(wildcards):
    try:
        return GRAPH.series_inputs(wildcards.series)
    except UnknownCell as error:
        raise WorkflowError(str(error))


@job_function
def series_input_args(wildcards):
    return GRAPH.series_input_args(wildcards.series)


@job_function
def series_launch_file(wildcards):
    return GRAPH.series_launch_file(wildcards.series)


@job_function
def goal_input(wildcards):
    return GRAPH.goal_input(wildcards.cell)


@job_function
def card_goal(wildcards):
    return GRAPH.card_goal(wildcards.cell)


def checkpoint_verdict(cell):
    """A probe's verdict through its checkpoint; None while it is not judged."""
    try:
        return read_verdict(checkpoints.cell_slo.get(cell=cell).output.slo)
    except IncompleteCheckpointException:
        return None


@job_function
def slo_table_inputs(wildcards):
    """Each series' search file and the judgements of the probes its walk has reached: every
    series walks at once (each stops at its own next probe). Plain paths, no
    `checkpoint_target` flag: Snakemake skips the is-the-output-older check of a job with a
    flagged input and prunes what it would need (docs/slo.md)."""
    probes = []
    for search in GRAPH.searches.values():
        walked = walked_probes(
            search, RESULTS, GRAPH.goals_dir, checkpoint_verdict, workflow.dryrun
        )
        probes += [f"{RESULTS}/cells/{cell}/slo.json" for cell in walked]
    return {"searches": GRAPH.search_files(), "probes": probes}


@job_function
def sweep_gpus(wildcards):
    return GRAPH.sweep_gpus()


@job_function
def all_cells_settings(wildcards):
    return GRAPH.all_cells_settings()


@job_function
def card_settings(wildcards):
    return GRAPH.card_settings(wildcards.cell)


@job_function
def cell_report_subcategory(wildcards):
    return GRAPH.cells[wildcards.cell].model


def cell_report_labels(figure):
    """A cell's labels in the report for one of its figures (workflow_scripts.outputs.labels)."""

    @job_function
    def of_cell(wildcards):
        return GRAPH.report_labels(wildcards.cell, figure)

    return of_cell
