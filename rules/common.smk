# The cell list and the helpers that give each rule its inputs and params.
# All decisions call into workflow_scripts; nothing here computes a figure.
# The config is checked by workflow_scripts.matrix.validate_config against
# schemas/config.schema.yaml (defaults filled in) plus its cross references, so
# every error names the offending key before anything is downloaded.
import sys

sys.path.insert(0, workflow.basedir)

from snakemake.exceptions import WorkflowError

from workflow_scripts.atomic import canonical_json
from workflow_scripts.failures import failure_count
from workflow_scripts.matrix import ConfigError, build_cells, validate_config
from workflow_scripts.weights import weights_dependencies

try:
    CONFIG = validate_config(config)
    CELLS = {cell.id: cell for cell in build_cells(CONFIG)}
except ConfigError as error:
    raise WorkflowError(str(error))

RESULTS = CONFIG["results_dir"]
FAILURES = f"{RESULTS}/failures"
WEIGHTS = {}
for _cell in CELLS.values():
    if _cell.blocked:
        continue
    WEIGHTS[_cell.weights_key] = _cell.weights
    if _cell.drafter_weights:
        WEIGHTS[_cell.drafter_weights_key] = _cell.drafter_weights
for _spec in list(WEIGHTS.values()):
    WEIGHTS.update(weights_dependencies(_spec))


wildcard_constraints:
    cell="|".join(CELLS) or "no-cells",
    weights="[A-Za-z0-9._-]+__[A-Za-z0-9._-]+",
    engine="[A-Za-z0-9._-]+",


def final_outputs():
    return [
        f"{RESULTS}/summary/summary.csv",
        f"{RESULTS}/summary/summary.md",
        f"{RESULTS}/summary/spec_gain.csv",
        f"{RESULTS}/summary/spec_gain.md",
        f"{RESULTS}/summary/decode_tok_s.png",
    ]


def weights_spec(wildcards):
    return canonical_json(WEIGHTS[wildcards.weights])


def weights_inputs(wildcards):
    """Manifests of the weights this entry is built from (a synthetic model's tokenizer)."""
    deps = weights_dependencies(WEIGHTS[wildcards.weights])
    return [f"{RESULTS}/weights/{key}.json" for key in deps]


def weights_failures(wildcards):
    return failure_count(FAILURES, f"weights-{wildcards.weights}")


def engine_spec(wildcards):
    return canonical_json(CONFIG["engines"][wildcards.engine])


def engine_failures(wildcards):
    return failure_count(FAILURES, f"engine-{wildcards.engine}")


def cell_inputs(wildcards):
    cell = CELLS[wildcards.cell]
    if cell.blocked:
        return {}
    inputs = {
        "engine": f"{RESULTS}/engines/{cell.engine}.json",
        "weights": f"{RESULTS}/weights/{cell.weights_key}.json",
    }
    if cell.drafter_weights_key:
        inputs["drafter_weights"] = f"{RESULTS}/weights/{cell.drafter_weights_key}.json"
    return inputs


def cell_settings(wildcards):
    return canonical_json(CELLS[wildcards.cell].to_dict())


def cell_failures(wildcards):
    return failure_count(FAILURES, wildcards.cell)


def all_cell_metrics():
    return [f"{RESULTS}/cells/{cell_id}/metrics.json" for cell_id in CELLS]
