"""A workload's `dataset.history` (dataset | model): read into the cell and onto its command line;
refused while the config is read, naming the key, where it means nothing (no conversations, a
kind without them) or is neither value. `record_outputs: false` beside `history: model` is
accepted: the load keeps the answers it sends in memory and writes none (docs/config.md)."""

from __future__ import annotations

import copy

import pytest

from tests.support.config import default_config, setter
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.loadgen.command import client_argv
from workflow_scripts.vocabulary import ConfigError

SHAREGPT = {"kind": "sharegpt", "path": "talks.json"}


def cells(dataset: dict, **workload) -> list:
    config = copy.deepcopy(default_config())
    setter(["workloads", "c4", "dataset"], dataset)(config)
    for key, value in workload.items():
        setter(["workloads", "c4", key], value)(config)
    if workload.get("record_outputs") is False:  # a floor run beside it is refused
        for entry in config["cells"]:
            entry.pop("fidelity_floor", None)
    return [c for c in build_cells(validate_config(config)) if c.workload == "c4"]


@pytest.mark.parametrize("history", ["model", "dataset"])
def test_a_cell_carries_history_and_its_command_line_says_it(history):
    dataset = {**SHAREGPT, "conversations": True, "history": history}
    cell = cells(dataset, record_outputs=False)[0]
    assert cell.workload_spec.dataset.history == history
    assert cell.workload_spec.dataset.to_dict()["history"] == history
    argv = client_argv(cell.workload_spec, "http://x:1", "out")
    assert argv[argv.index("--history") + 1] == history
    assert "--no-record-outputs" in argv


def test_no_history_leaves_the_cell_and_its_command_line_as_they_were():
    cell = cells({**SHAREGPT, "conversations": True})[0]
    assert cell.workload_spec.dataset.history is None
    assert "history" not in cell.workload_spec.dataset.to_dict()
    assert "--history" not in client_argv(cell.workload_spec, "http://x:1", "out")


@pytest.mark.parametrize(
    "dataset,key,expected",
    [
        ({**SHAREGPT, "history": "model"}, "dataset", "as 'history' is given"),
        (
            {**SHAREGPT, "conversations": False, "history": "model"},
            "dataset.conversations",
            "as 'history' is given",
        ),
        ({**SHAREGPT, "conversations": True, "history": "mine"}, "dataset.history", "'mine'"),
        ({"kind": "humaneval", "history": "model"}, "dataset", "'history'"),
        ({"kind": "random", "history": "dataset"}, "dataset", "'history'"),
    ],
    ids=["without conversations", "conversations false", "other value", "humaneval", "random"],
)
def test_history_is_refused_naming_the_key(dataset, key, expected):
    with pytest.raises(ConfigError) as error:
        cells(dataset)
    message = str(error.value)
    assert f"config key 'workloads.c4.{key}'" in message and expected in message, message
