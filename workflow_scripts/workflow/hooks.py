"""What rules/common.smk runs besides declaring rules, importable: the DAG and the rules' job
functions built once while the Snakefile is parsed, and the run's start and end handlers.

- `open_workflow`: GRAPH (the validated config's DAG; an error names its key before anything
  runs) and JOBS; the parse-time files written; a cell's cut-short metrics.json named and made
  a failed record (a dry run: named), so the cell is measured again; SIGTERM set to end a run
  or a dry run still planning (workflow_scripts.cell.interrupt says why Snakemake alone could
  hang there); the Python the series' server (a shell rule) runs with — the rules' conda env's
  under --use-conda, else the one running Snakemake (a bare venv need not be on PATH) — handed
  over in the environment, never as a param (workflow_scripts.cell.series.write_series_files
  says why).
- `run_started`: one run at a time measures into a results_dir (a second refuses), and SIGTERM
  to snakemake tears the running cells' servers down now (the cells are redone next run).
- `run_ended`: the lock released and the terminal's last lines (run_end). Snakemake calls
  neither handler for a dry run nor when there is nothing to be done.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod

from ..cell.interrupt import forward_sigterm_to_jobs, sigterm_never_waits_on_itself
from ..cell.results_dir import ResultsDirLocked, acquire_results_lock, release_results_lock
from ..outputs.run_end import print_run_end
from ..vocabulary import ConfigError
from .dag import Dag, build_dag
from .rule_jobs import RuleJobs


def open_workflow(config: dict[str, Any], checkpoints: Any, workflow: Any) -> tuple[Dag, RuleJobs]:
    """GRAPH and JOBS of the Snakefile, with what they need set before rules are declared."""
    try:
        graph = build_dag(config)
    except ConfigError as error:
        raise WorkflowError(str(error)) from None
    graph.write_parse_files()
    if workflow.is_main_process:  # a job's own process (a cluster job) leaves the results be
        graph.heal_cells(dry_run(workflow))
    sigterm_never_waits_on_itself()  # before Snakemake builds its scheduler
    conda = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    os.environ["LLMBENCH_PYTHON"] = "python" if conda else sys.executable
    os.environ["LLMBENCH_WORKFLOW"] = workflow.basedir
    return graph, RuleJobs(graph, checkpoints, workflow)


def dry_run(workflow: Any) -> bool:
    """Whether this is a dry run, while the Snakefile is parsed: the executor (what
    `workflow.dryrun` reads) is set only later, the output settings from the start."""
    settings = getattr(workflow, "output_settings", None)
    return bool(getattr(settings, "dryrun", False)) or bool(workflow.dryrun)


def run_started(graph: Dag) -> None:
    try:
        acquire_results_lock(graph.results)
    except ResultsDirLocked as error:
        raise WorkflowError(str(error)) from None
    forward_sigterm_to_jobs()


def run_ended(graph: Dag, succeeded: bool) -> None:
    """The lock released; the result table printed after a run, or after a failed one that held
    the lock (one refused at the start holds none and says nothing more)."""
    if release_results_lock(graph.results) or succeeded:
        print_run_end(graph.results, graph.run_end_cells())
