"""Repeats in the real DAG (`snakemake -n` on the fixture results tree): introducing `repeats: 1`
runs nothing, `repeats: 3` runs exactly the two new repeats, and a 4th repeat exactly one
target. The blocked cell, which Snakemake ran for real here (so its params are recorded), is
never rerun by any of it."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests.support.outputs import BASE_C4, BLOCKED, results_tree
from tests.support.pipeline import planned_cells, run_snakemake


def set_repeats(workdir, repeats: int) -> None:
    path = workdir / "matrix.yaml"
    config = yaml.safe_load(path.read_text())
    config["workloads"]["c4"]["repeats"] = repeats  # BASE_C4 and the blocked cell
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def pretend_done(results, repeat: str) -> None:
    """A repeat's outputs as if it had run: the cell's fixture results under the repeat's id."""
    shutil.copytree(results / "cells" / BASE_C4, results / "cells" / repeat)
    metrics = json.loads((results / "cells" / repeat / "metrics.json").read_text())
    metrics["cell"] = repeat
    (results / "cells" / repeat / "metrics.json").write_text(json.dumps(metrics))
    # dated as the cell it copies: newer than its inputs, as a finished run's outputs are
    shutil.copystat(
        results / "cells" / BASE_C4 / "metrics.json", results / "cells" / repeat / "metrics.json"
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("repeats")
    results_tree(workdir)
    target = f"results/cells/{BLOCKED}/metrics.json"
    proc = run_snakemake(workdir, target, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert planned_cells(workdir) == set()  # every benchmark done
    return workdir


def test_adding_repeats_runs_exactly_the_new_targets(workdir):
    set_repeats(workdir, 1)
    assert planned_cells(workdir) == set()  # repeat 1 is the cell as it was
    set_repeats(workdir, 3)
    assert planned_cells(workdir) == {f"{BASE_C4}__r2", f"{BASE_C4}__r3"}
    results = workdir / "results"
    pretend_done(results, f"{BASE_C4}__r2")
    pretend_done(results, f"{BASE_C4}__r3")
    assert planned_cells(workdir) == set()
    set_repeats(workdir, 4)
    assert planned_cells(workdir) == {f"{BASE_C4}__r4"}  # a 4th repeat: one target
