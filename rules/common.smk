# The cell list and the helpers that give each rule its inputs and params.
# All decisions call into workflow_scripts; nothing here computes a figure.
# The config is checked by workflow_scripts.config.matrix.validate_config against
# schemas/config.schema.yaml (defaults filled in) plus its cross references, so
# every error names the offending key before anything is downloaded.
import os
import shlex
import sys

# This checkout's workflow_scripts, installed or not. Snakemake hands this search path on to
# every script job, which is how jobs in the rules' conda env (envs/bench.yaml: dependencies
# only) find the code of the workflow they belong to.
sys.path.insert(0, workflow.basedir)

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod

from workflow_scripts.atomic import param_json
from workflow_scripts.cell.failures import failure_counts
from workflow_scripts.cell.series import (
    forget_provenance,
    launch_path,
    record_path,
    write_series_files,
)
from workflow_scripts.cell.interrupt import (
    forward_sigterm_to_jobs,
    sigterm_never_waits_on_itself,
)
from workflow_scripts.cell.results_dir import (
    ResultsDirLocked,
    acquire_results_lock,
    release_results_lock,
    write_at_parse,
)
from workflow_scripts.config.matrix import build_matrix, validate_config
from workflow_scripts.config.probes import probe_of
from workflow_scripts.config.resources import (
    declared_resources,
    resources_by_cell,
    resources_by_search,
    without_resources,
)
from workflow_scripts.config.sweeps import launch_cell, series_resources, shared_series
from workflow_scripts.job_functions import job_function
from workflow_scripts.outputs.labels import (
    front_page_files,
    optional_summary_figures,
    report_labels,
    sweep_cell_ids,
    sweep_outputs,
)
from workflow_scripts.outputs.run_end import print_run_end
from workflow_scripts.vocabulary import ConfigError
from workflow_scripts.weights.fetch import (
    step_engine,
    weights_dependencies,
    with_dependencies,
)

try:
    _VALIDATED = validate_config(config)
    # Resources say where a cell runs, not what it measures: kept out of every param.
    CONFIG = without_resources(_VALIDATED)
    _MATRIX = build_matrix(CONFIG)
    CELLS = {cell.id: cell for cell in _MATRIX.cells}
    CELL_RESOURCES = resources_by_cell(_VALIDATED, _MATRIX)
    # Latency-goal searches (rules/search.smk): their probes are cells made on demand, by id.
    SEARCHES = _MATRIX.searches
    SEARCH_RESOURCES = resources_by_search(_VALIDATED, _MATRIX)
except ConfigError as error:
    raise WorkflowError(str(error))
# The series whose points share one server start (workflow_scripts.cell.shared): each point is
# a cell job in its series' group, with the series' server as a service job beside it.
SERIES = shared_series(CELLS.values())
SERIES_OF = {point.id: name for name, points in SERIES.items() for point in points}
CELL_RESOURCES, SERIES_RESOURCES = series_resources(SERIES, CELL_RESOURCES)


# SIGTERM ends a run or a dry run that is still planning (workflow_scripts.cell.interrupt says why
# Snakemake alone could hang there); set before Snakemake builds its scheduler.
sigterm_never_waits_on_itself()


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
    print_run_end(RESULTS, run_end_cells())


onerror:
    if release_results_lock(RESULTS):
        print_run_end(RESULTS, run_end_cells())


RESULTS = CONFIG["results_dir"]
SERIES_RECORDS = {name: str(record_path(f"{RESULTS}/cells", name)) for name in SERIES}
FAILURES = f"{RESULTS}/failures"
# What each key (cell id, `engine-<name>`, `weights-<key>`) has failed so far: a job's param, so
# a failed one is retried next run (workflow_scripts.cell.failures).
FAILED_ATTEMPTS = failure_counts(FAILURES)
WEIGHTS = {}
# A search's probes run its template's weights (rules/search.smk).
for _cell in [*CELLS.values(), *(search.template for search in SEARCHES.values())]:
    if _cell.blocked:
        continue
    WEIGHTS[_cell.weights_key] = _cell.weights
    if _cell.drafter_weights:
        WEIGHTS[_cell.drafter_weights_key] = _cell.drafter_weights
WEIGHTS = with_dependencies(WEIGHTS)


# A cell id is its five names joined by `__` (workflow_scripts.config.matrix.cell_id). The
# constraint says only what an id looks like, not which ids exist: a 200-way alternative of
# every id made a 200-cell dry run cost a third more. cell_inputs names an unknown id.
wildcard_constraints:
    cell="[A-Za-z0-9._-]+",
    weights="[A-Za-z0-9._-]+__[A-Za-z0-9._-]+",
    engine="[A-Za-z0-9._-]+",
    series="[A-Za-z0-9._-]+",


def final_outputs():
    """The tables and the report. The cards come in through the report (html_report takes
    them): listed here too, each card was one more edge for a large matrix's DAG."""
    return [
        f"{RESULTS}/summary/summary.csv",
        f"{RESULTS}/summary/summary.md",
        f"{RESULTS}/summary/spec_gain.csv",
        f"{RESULTS}/summary/spec_gain.md",
        f"{RESULTS}/summary/comparisons.csv",
        f"{RESULTS}/summary/decode_tok_s.png",
        *SWEEP_OUTPUTS,
        *search_outputs(),
        f"{RESULTS}/report.html",
    ]


# Every function the rules hand Snakemake per job is a @job_function: its signature looked up once,
# not at each of its calls (workflow_scripts/job_functions.py).


@job_function
def weights_spec(wildcards):
    return param_json(WEIGHTS[wildcards.weights])


@job_function
def weights_inputs(wildcards):
    """What a weights step reads: the manifest of the entry it is built from (a synthetic
    model's tokenizer, a derived entry's source) and the stamp of the engine whose tools a
    derived entry runs."""
    spec = WEIGHTS[wildcards.weights]
    inputs = {}
    for key in weights_dependencies(spec):  # at most one
        inputs["source"] = f"{RESULTS}/weights/{key}.json"
    engine = step_engine(spec)
    if engine:
        inputs["engine"] = f"{RESULTS}/engines/{engine}.json"
    return inputs


@job_function
def weights_failures(wildcards):
    return FAILED_ATTEMPTS.get(f"weights-{wildcards.weights}", 0)


@job_function
def engine_spec(wildcards):
    return param_json(CONFIG["engines"][wildcards.engine])


@job_function
def engine_failures(wildcards):
    return FAILED_ATTEMPTS.get(f"engine-{wildcards.engine}", 0)


def cell_of(cell_id):
    """The cell an id names: one of the matrix, or a probe of a search (built from its id)."""
    if cell_id in CELLS:
        return CELLS[cell_id]
    probe = probe_of(SEARCHES, cell_id)
    if probe is None:
        raise WorkflowError(
            f"no cell {cell_id!r} in this config; "
            "`python -m workflow_scripts.plan` lists its cells"
        )
    search, key = probe
    return search.probe(key)


def cell_resources_of(cell_id):
    if cell_id in CELL_RESOURCES:
        return CELL_RESOURCES[cell_id]
    return SEARCH_RESOURCES[probe_of(SEARCHES, cell_id)[0].series]


@job_function
def cell_inputs(wildcards):
    inputs = inputs_of(cell_of(wildcards.cell))
    if wildcards.cell in SERIES_OF:
        # ancient: a new server start never reruns the points that ran on an earlier one
        inputs["server"] = ancient(series_record(SERIES_OF[wildcards.cell]))
    return inputs


def inputs_of(cell):
    """The stamps of what a cell runs: its engine, its weights, its drafter's weights."""
    if cell.blocked:
        return {}
    inputs = {
        "engine": f"{RESULTS}/engines/{cell.engine}.json",
        "weights": f"{RESULTS}/weights/{cell.weights_key}.json",
    }
    if cell.drafter_weights_key:
        inputs["drafter_weights"] = f"{RESULTS}/weights/{cell.drafter_weights_key}.json"
    return inputs


def series_record(series):
    return SERIES_RECORDS[series]


@job_function
def cell_threads(wildcards):
    """A point of a shared series holds no core: Snakemake adds up the threads of a group's
    jobs that start together, and its points start together (they take turns on the server).
    """
    return 0 if wildcards.cell in SERIES_OF else 1


@job_function
def cell_group(wildcards):
    series = SERIES_OF.get(wildcards.cell)
    return f"series-{series}" if series else None


@job_function
def series_inputs(wildcards):
    """What a series' server job reads: what its launch point's cell job reads."""
    if wildcards.series not in SERIES:
        raise WorkflowError(
            f"no series {wildcards.series!r} shares a server in this config"
        )
    return inputs_of(launch_cell(SERIES[wildcards.series]))


@job_function
def series_input_args(wildcards):
    """The series' inputs as its server command's flags (`--engine PATH --weights PATH`)."""
    return " ".join(
        f"--{name.replace('_', '-')} {shlex.quote(path)}"
        for name, path in series_inputs(wildcards).items()
    )


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


@job_function
def series_launch_file(wildcards):
    return str(launch_path(f"{RESULTS}/cells", wildcards.series))


@job_function
def cell_settings(wildcards):
    """Published reference figures feed only cards and tables: editing one never reruns a cell."""
    if wildcards.cell not in CELL_DICTS:
        return param_json({**cell_of(wildcards.cell).to_dict(), "reference": {}})
    return param_json({**CELL_DICTS[wildcards.cell], "reference": {}})


@job_function
def cell_failures(wildcards):
    return FAILED_ATTEMPTS.get(wildcards.cell, 0)


# The cell and series rules' resources (workflow_scripts.config.resources): what the Slurm
# executor requests, and what a local `--resources gpu=N` counts.
CELL_RULE_RESOURCES = declared_resources(
    [*CELL_RESOURCES.values(), *SEARCH_RESOURCES.values()],
    lambda wildcards: cell_resources_of(wildcards.cell),
)
# The series' server holds the machine whatever its cells ask (rules/cells.smk).
SERIES_RULE_RESOURCES = declared_resources(
    list(SERIES_RESOURCES.values()),
    lambda wildcards: SERIES_RESOURCES[wildcards.series],
    leave_out={"machine"},
)


def all_cell_metrics():
    return [f"{RESULTS}/cells/{cell_id}/metrics.json" for cell_id in CELLS]


# What every table and figure reads, from the records job: each cell's record files, listed.
CELL_RECORDS = f"{RESULTS}/cells/records.json"


# Cards, summary tables and figures, the report (rules/report.smk). They take the config's view
# of the cells as params, so a card or table follows a config edit without rerunning a cell.


# Each cell as plain data, made once: Snakemake asks for these params for every job of a large
# matrix. The rules' scripts rebuild the cells from them (Cell.from_dict).
CELL_DICTS = {cell_id: cell.to_dict() for cell_id, cell in CELLS.items()}

# Each series' server record exists between runs, and its launch cell is a file, never a param
# (workflow_scripts.cell.series.write_series_files says why). Skipped with a line where the
# results dir is read-only: a dry run does not need them.
write_at_parse(
    "the shared series' launch files",
    write_series_files,
    f"{RESULTS}/cells",
    {name: CELL_DICTS[launch_cell(points).id] for name, points in SERIES.items()},
)
forget_provenance(".", SERIES_RECORDS.values())
ALL_CELLS_SETTINGS = param_json(list(CELL_DICTS.values()))
# Every summary figure this matrix gets: concurrency and reference plots only when the matrix
# sweeps concurrency or has published figures.
SUMMARY_FIGURES = [
    f"{RESULTS}/summary/{name}.png"
    for name in ["decode_tok_s", "latency", "peak_memory", "spec_gain"]
    + optional_summary_figures(list(CELLS.values()))
]


def summary_figures():
    return SUMMARY_FIGURES


# The sweep tables and figures (the sweeps job), only for a matrix with a sweep; they read only the
# points' records, and each point's GPU count (resources.gpu, kept out of the cells' settings) for
# throughput per GPU.
SWEEP_CELLS = sweep_cell_ids(list(CELLS.values()))
SWEEP_OUTPUTS = [
    f"{RESULTS}/summary/{name}" for name in sweep_outputs(list(CELLS.values()))
]
SWEEP_GPUS = param_json(
    {cell_id: CELL_RESOURCES[cell_id].get("gpu") for cell_id in SWEEP_CELLS}
)


@job_function
def sweep_gpus(wildcards):
    return SWEEP_GPUS


def front_page_inputs():
    """The sweep and search outputs the report's front page shows beside the index."""
    return front_page_files([*SWEEP_OUTPUTS, *search_outputs()])


def report_inputs():
    """What the HTML report shows: the cards, tables, figures and its front page."""
    return [
        *[f"{RESULTS}/cells/{cell_id}/card.md" for cell_id in CELLS],
        f"{RESULTS}/summary/index.md",
        f"{RESULTS}/summary/comparisons.md",
        *summary_figures(),
        *SWEEP_OUTPUTS,
        f"{RESULTS}/summary/overview.html",
        *search_report_inputs(),
    ]


@job_function
def all_cells_settings(wildcards):
    return ALL_CELLS_SETTINGS


@job_function
def card_settings(wildcards):
    return param_json(CELL_DICTS[wildcards.cell])


@job_function
def cell_report_subcategory(wildcards):
    return CELLS[wildcards.cell].model


def cell_report_labels(figure):
    """A cell's labels in the report for one of its figures (workflow_scripts.outputs.labels)."""

    @job_function
    def of_cell(wildcards):
        return report_labels(CELLS[wildcards.cell], figure)

    return of_cell
