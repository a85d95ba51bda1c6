# GRAPH, the DAG of the config (workflow_scripts.workflow.dag; not `DAG`, a name Snakemake's workflow
# uses), built once from the config validated against schemas/config.schema.yaml: every error
# names its key before anything runs. JOBS hands the rules their outputs (each rule's files are
# listed once, in workflow_scripts.outputs.labels.RULE_FILES) and their job functions
# (workflow_scripts.workflow.rule_jobs), each a method that asks GRAPH.
import sys

# This checkout's workflow_scripts, installed or not. Snakemake hands this search path on to
# every script job, which is how jobs in the rules' conda env (envs/bench.yaml: dependencies
# only) find the code of the workflow they belong to.
sys.path.insert(0, workflow.basedir)

from workflow_scripts.workflow.hooks import open_workflow, run_ended, run_started

GRAPH, JOBS = open_workflow(config, checkpoints, workflow)


envvars:
    "LLMBENCH_PYTHON",
    "LLMBENCH_WORKFLOW",


# Every rule but a cell's and a series' server runs where Snakemake runs: on a cluster (the Slurm
# executor, profiles/slurm) only the cells and their shared servers are jobs of their own.
localrules:
    weights,
    engine,
    cell_slo,
    slo_tables,
    fidelity_text,
    fidelity_base,
    fidelity_kld,
    fidelity_family,
    card,
    records,
    aggregate,
    comparisons,
    sweeps,
    fidelity,
    summary_plots,
    concurrency_figure,
    reference_figure,
    overview,
    html_report,


# One run at a time, the servers torn down on SIGTERM, the result table at the end
# (workflow_scripts/workflow/hooks.py).
onstart:
    run_started(GRAPH)


onsuccess:
    run_ended(GRAPH, succeeded=True)


onerror:
    run_ended(GRAPH, succeeded=False)


# A cell id is its five names joined by `__` (workflow_scripts.config.matrix.cell_id). The
# constraint says only what an id looks like, not which ids exist (a 200-way alternative of
# every id would make a 200-cell dry run cost a third more). An unknown id is named by its job.
wildcard_constraints:
    cell="[A-Za-z0-9._-]+",
    weights="[A-Za-z0-9._-]+__[A-Za-z0-9._-]+",
    engine="[A-Za-z0-9._-]+",
    series="[A-Za-z0-9._-]+",
    model="[A-Za-z0-9._-]+",
