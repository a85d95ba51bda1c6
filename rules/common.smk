# GRAPH, the DAG of the config (workflow_scripts.dag; not `DAG`, a name Snakemake's workflow
# uses), built once from the config validated against schemas/config.schema.yaml: every error
# names its key before anything runs. JOBS hands the rules their outputs (each rule's files are
# listed once, in workflow_scripts.outputs.labels.RULE_FILES) and their job functions
# (workflow_scripts.rule_jobs), each a method that asks GRAPH.
import os
import sys

# This checkout's workflow_scripts, installed or not. Snakemake hands this search path on to
# every script job, which is how jobs in the rules' conda env (envs/bench.yaml: dependencies
# only) find the code of the workflow they belong to.
sys.path.insert(0, workflow.basedir)

from snakemake.exceptions import WorkflowError
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
from workflow_scripts.dag import build_dag
from workflow_scripts.outputs.run_end import print_run_end
from workflow_scripts.rule_jobs import RuleJobs
from workflow_scripts.vocabulary import ConfigError

try:
    GRAPH = build_dag(config)
except ConfigError as error:
    raise WorkflowError(str(error))
GRAPH.write_parse_files()
JOBS = RuleJobs(GRAPH, checkpoints, workflow)

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
        acquire_results_lock(GRAPH.results)
    except ResultsDirLocked as error:
        raise WorkflowError(str(error))
    forward_sigterm_to_jobs()


# The terminal ends with the result: a line per cell and per probe of a search, how many failed,
# where the report is. Snakemake calls neither handler for a dry run nor when there is nothing
# to be done.
onsuccess:
    release_results_lock(GRAPH.results)
    print_run_end(GRAPH.results, GRAPH.run_end_cells())


onerror:
    if release_results_lock(GRAPH.results):
        print_run_end(GRAPH.results, GRAPH.run_end_cells())


# A cell id is its five names joined by `__` (workflow_scripts.config.matrix.cell_id). The
# constraint says only what an id looks like, not which ids exist (a 200-way alternative of
# every id would make a 200-cell dry run cost a third more). An unknown id is named by its job.
wildcard_constraints:
    cell="[A-Za-z0-9._-]+",
    weights="[A-Za-z0-9._-]+__[A-Za-z0-9._-]+",
    engine="[A-Za-z0-9._-]+",
    series="[A-Za-z0-9._-]+",
