"""The README default run's results, for tests that would otherwise rerun what it ran.

`.ci/run` runs the README's first command in the clone root, then exports
`LLMBENCH_DEFAULT_RESULTS=<clone>/results` for pytest: its vLLM cells (bf16, without and with the
ngram drafter) and its llama.cpp cells on the GGUFs converted back from that bf16 are already
there. A test reads them through `default_run`; with the variable unset it makes its own run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.loadgen.records import RequestRecord, read_records
from workflow_scripts.vocabulary import Cell, Status

DEFAULT_RESULTS_ENV = "LLMBENCH_DEFAULT_RESULTS"


@dataclass(frozen=True)
class PipelineRun:
    """A finished pipeline run: its `results/` folder and the config it ran (the workdir, the
    folder above `results/`, is where Snakemake ran and started its servers)."""

    results: Path
    config: dict[str, Any]

    @property
    def workdir(self) -> Path:
        return self.results.parent

    def cells(self, wanted: Callable[[Cell], bool]) -> list[Cell]:
        """The config's cells that `wanted` accepts, in config order."""
        return [cell for cell in build_cells(validate_config(self.config)) if wanted(cell)]

    def metrics(self, cell: Cell) -> dict[str, Any]:
        return json.loads((self.results / "cells" / cell.id / "metrics.json").read_text())

    def records(self, cell: Cell) -> list[RequestRecord]:
        return read_records(self.results / "cells" / cell.id / "requests.jsonl")

    def engine(self, name: str) -> dict[str, Any]:
        return json.loads((self.results / "engines" / f"{name}.json").read_text())

    def weights(self, cell: Cell) -> dict[str, Any]:
        return json.loads((self.results / "weights" / f"{cell.weights_key}.json").read_text())


def default_run(wanted: Callable[[Cell], bool]) -> PipelineRun | None:
    """The default run that $LLMBENCH_DEFAULT_RESULTS names, once every cell `wanted` picks from
    its config is there and done; None when the variable is unset. A run without such cells, or
    with one missing or not done, fails the test, naming the path: CI said the results are there.
    """
    value = os.environ.get(DEFAULT_RESULTS_ENV)
    if not value:
        return None
    results = Path(value)
    config_path = results.parent / "config.yaml"
    if not config_path.is_file():
        pytest.fail(
            f"{DEFAULT_RESULTS_ENV}={value}: no {config_path} beside it (the default run's "
            "config, in the folder the README's first command ran in)"
        )
    run = PipelineRun(results, yaml.safe_load(config_path.read_text()))
    cells = run.cells(wanted)
    if not cells:
        pytest.fail(f"{DEFAULT_RESULTS_ENV}={value}: {config_path} has none of the cells needed")
    for cell in cells:
        path = results / "cells" / cell.id / "metrics.json"
        if not path.is_file():
            pytest.fail(f"{DEFAULT_RESULTS_ENV}={value}: {path} is missing")
        status = json.loads(path.read_text()).get("status")
        if status != Status.DONE:
            pytest.fail(f"{DEFAULT_RESULTS_ENV}={value}: {path} has status {status}, not done")
    return run
