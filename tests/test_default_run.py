"""Tests read the README default run's results only when CI names them, and only whole: a cell
they need that is missing or not done fails them, naming the path, rather than letting them
pass on less than they claim. The default runs here are folders written by hand (config.yaml,
metrics.json): stand-ins for a run that takes an hour."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support.config import REPO
from tests.support.default_run import DEFAULT_RESULTS_ENV, default_run
from workflow_scripts.vocabulary import Cell

REPO_CONFIG = "config.yaml"


def vllm(cell: Cell) -> bool:
    return cell.engine == "vllm-cpu"


@pytest.fixture
def results(tmp_path, monkeypatch):
    """A clone root with the default config and an empty results/ that the variable names."""
    shutil.copy(REPO / REPO_CONFIG, tmp_path / REPO_CONFIG)
    (tmp_path / "results").mkdir()
    monkeypatch.setenv(DEFAULT_RESULTS_ENV, str(tmp_path / "results"))
    return tmp_path / "results"


def write_metrics(results, cell_id: str, status: str) -> None:
    folder = results / "cells" / cell_id
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"status": status}))


def test_without_the_variable_there_is_no_default_run(monkeypatch):
    monkeypatch.delenv(DEFAULT_RESULTS_ENV, raising=False)
    assert default_run(vllm) is None


def test_a_missing_or_unfinished_cell_fails_naming_its_path(results):
    with pytest.raises(
        pytest.fail.Exception, match="smollm2-135m__vllm-cpu__bf16__none__c4.*missing"
    ):
        default_run(vllm)
    write_metrics(results, "smollm2-135m__vllm-cpu__bf16__none__c4", "done")
    write_metrics(results, "smollm2-135m__vllm-cpu__bf16__ngram__c4", "failed")
    with pytest.raises(pytest.fail.Exception, match=r"ngram__c4/metrics.json has status failed"):
        default_run(vllm)


def test_a_run_without_the_cells_needed_or_its_config_fails(results):
    with pytest.raises(pytest.fail.Exception, match="has none of the cells needed"):
        default_run(lambda cell: cell.engine == "no-such-engine")
    (results.parent / REPO_CONFIG).unlink()
    with pytest.raises(pytest.fail.Exception, match=f"no {results.parent / REPO_CONFIG}"):
        default_run(vllm)


def test_a_finished_run_gives_its_cells_and_records(results):
    ids = ["smollm2-135m__vllm-cpu__bf16__none__c4", "smollm2-135m__vllm-cpu__bf16__ngram__c4"]
    for cell_id in ids:
        write_metrics(results, cell_id, "done")
    record = {"index": 0, "prompt_index": 3, "status": "ok", "prompt_tokens": 41}
    (results / "cells" / ids[0] / "requests.jsonl").write_text(json.dumps(record) + "\n")
    run = default_run(vllm)
    assert run is not None and run.workdir == results.parent
    cells = run.cells(vllm)
    assert [cell.id for cell in cells] == ids
    assert run.metrics(cells[1]) == {"status": "done"}
    assert [(r.prompt_index, r.prompt_tokens) for r in run.records(cells[0])] == [(3, 41)]
