"""`energy` and `cost` as the config says them (config/energy.py): the one rule that picks a
cell's counter, its place in the cell's settings, and a price kept out of every setting a cell
or engine step runs on; bad values refused naming their key before anything runs."""

from __future__ import annotations

import json

import pytest

from tests.support.pipeline import tiny_config
from workflow_scripts.config.energy import prices_by_cell
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.vocabulary import ConfigError
from workflow_scripts.workflow.dag import build_dag

CELL = "smollm2-135m__llamacpp-cpu__q4_1__none__tiny"


def one_cell(**engine: object) -> dict:
    config = tiny_config([{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"}])
    config["engines"]["llamacpp-cpu"].update(engine)
    return config


def source_of(config: dict) -> str:
    (cell,) = build_cells(validate_config(config))
    return cell.run.energy_source


def test_auto_reads_nvml_where_the_config_says_the_server_uses_gpus_else_rapl():
    assert source_of(one_cell()) == "rapl"
    assert source_of(one_cell(env={"CUDA_VISIBLE_DEVICES": "0"})) == "nvml"
    for hidden in ("", "-1"):
        assert source_of(one_cell(env={"CUDA_VISIBLE_DEVICES": hidden})) == "rapl"
    docker = {"launch": "docker", "docker": {"image": "ghcr.io/ggml-org/llama.cpp:server"}}
    assert source_of(one_cell(**docker)) == "nvml"  # `--gpus all`, the default
    docker["docker"] = {**docker["docker"], "gpus": ""}
    assert source_of(one_cell(**docker)) == "rapl"
    for layer in ("matrix", "engine", "entry"):
        config = one_cell()
        where = {
            "matrix": config,
            "engine": config["engines"]["llamacpp-cpu"],
            "entry": config["cells"][0],
        }[layer]
        where["resources"] = {"gpu": 1}
        assert source_of(config) == "nvml", layer
    config = one_cell(resources={"gpu": 1})
    config["cells"][0]["resources"] = {"gpu": 0}  # the entry's over the engine's
    assert source_of(config) == "rapl"


def test_a_set_source_wins_the_engines_over_the_matrix_wide():
    config = one_cell(env={"CUDA_VISIBLE_DEVICES": "0"})
    config["energy"] = {"source": "rapl"}
    assert source_of(config) == "rapl"
    config["engines"]["llamacpp-cpu"]["energy"] = {"source": "none"}
    assert source_of(config) == "none"
    config["energy"] = {"source": "none"}
    config["engines"]["llamacpp-cpu"]["energy"] = {"source": "auto"}
    assert source_of(config) == "nvml"


def test_the_source_is_a_cell_setting_and_a_price_is_in_none():
    """A changed source changes the cell rule's param (it reruns the cell); a price changes
    neither a cell's param nor its engine step's, and reaches the tables by cell."""
    plain = build_dag(one_cell())
    assert json.loads(plain.cell_settings(CELL))["run"]["energy_source"] == "rapl"
    forced = one_cell()
    forced["energy"] = {"source": "none"}
    assert build_dag(forced).cell_settings(CELL) != plain.cell_settings(CELL)
    priced = one_cell(cost={"usd_per_kwh": 0.12}, energy={"source": "rapl"})
    priced["cost"] = {"usd_per_hour": 3.5}
    dag = build_dag(priced)
    assert dag.cell_settings(CELL) == plain.cell_settings(CELL)
    assert dag.engine_spec("llamacpp-cpu") == plain.engine_spec("llamacpp-cpu")
    assert "cost" not in dag.config and "cost" not in dag.config["engines"]["llamacpp-cpu"]
    assert json.loads(dag.cell_prices()) == {CELL: {"usd_per_kwh": 0.12}}  # the engine's, whole
    assert json.loads(plain.cell_prices()) == {CELL: None}
    matrix_wide = one_cell()
    matrix_wide["cost"] = {"usd_per_hour": 3.5}
    config = validate_config(matrix_wide)
    assert prices_by_cell(config, build_cells(config)) == {CELL: {"usd_per_hour": 3.5}}


@pytest.mark.parametrize(
    "where, value, key, words",
    [
        ("matrix", {"energy": {"source": "gpu"}}, "energy.source", "is not one of"),
        ("engine", {"energy": {"source": "dcgm"}}, "engines.llamacpp-cpu.energy.source", "not one"),
        ("engine", {"energy": {"sources": "nvml"}}, "engines.llamacpp-cpu.energy", "sources"),
        ("matrix", {"cost": {"usd_per_hour": -1}}, "cost.usd_per_hour", "less than or equal"),
        ("matrix", {"cost": {"usd_per_kwh": 0}}, "cost.usd_per_kwh", "less than or equal"),
        ("matrix", {"cost": {"eur_per_hour": 3}}, "cost", "eur_per_hour"),
        ("matrix", {"cost": {}}, "cost", "should be non-empty"),
        ("engine", {"cost": {"usd_per_hour": "3$"}}, "engines.llamacpp-cpu.cost.usd_per_hour",
         "not of type"),
        ("matrix", {"cost": {"usd_per_hour": 3, "usd_per_kwh": 0.2}}, "cost", "not both"),
        ("engine", {"cost": {"usd_per_hour": 3, "usd_per_kwh": 0.2}}, "engines.llamacpp-cpu.cost",
         "not both"),
    ],
)  # fmt: skip
def test_bad_energy_and_cost_values_are_refused_naming_their_key(where, value, key, words):
    config = one_cell()
    (config if where == "matrix" else config["engines"]["llamacpp-cpu"]).update(value)
    with pytest.raises(ConfigError, match=f"config key '{key}'") as found:
        validate_config(config)
    assert words in str(found.value)
