"""Cell resources: matrix-wide, then engine, then cells entry; blocked cells ask for almost
nothing; none of it reaches a cell's settings; the cell rule hands them to Snakemake."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.support.pipeline import run_snakemake, tiny_config, write_config
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.config.resources import (
    BLOCKED_SIZES,
    declared_resources,
    resources_by_cell,
    without_resources,
)
from workflow_scripts.vocabulary import ConfigError

BASE = "smollm2-135m__llamacpp-cpu__q4_1__none__tiny"
NGRAM = "smollm2-135m__llamacpp-cpu__q4_1__ngram__tiny"
BLOCKED = "smollm2-135m__llamacpp-cpu__q4_1__none__other"


def layered_config() -> dict:
    config = tiny_config(
        [
            {
                "matrix": {
                    "model": ["smollm2-135m"],
                    "engine": ["llamacpp-cpu"],
                    "drafter": ["none", "ngram"],
                    "workload": ["tiny"],
                },
                "resources": {"runtime": 30},
            },
            {
                "model": "smollm2-135m",
                "engine": "llamacpp-cpu",
                "workload": "other",
                "blocked": "needs a GPU this matrix lacks",
                "resources": {"gpu": 2},
            },
        ]
    )
    config["workloads"]["other"] = config["workloads"]["tiny"]
    config["resources"] = {"slurm_partition": "gpu", "mem_mb": 1000}
    config["engines"]["llamacpp-cpu"]["resources"] = {
        "gpu": 1,
        "mem_mb": 64000,
        "slurm_extra": "--qos=high",
    }
    return config


def test_later_layers_win_key_by_key():
    resources = resources_by_cell(validate_config(layered_config()))
    assert resources[BASE] == {
        "gpu": 1,  # engine
        "mem_mb": 64000,  # engine over matrix-wide
        "runtime": 30,  # cells entry over the default
        "cpus_per_task": 2,  # schema default
        "slurm_partition": "gpu",  # matrix-wide
        "slurm_extra": "--qos=high",  # engine
    }
    assert resources[NGRAM] == resources[BASE]


def test_defaults_fill_what_no_layer_sets():
    config = tiny_config([{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"}])
    assert resources_by_cell(validate_config(config)) == {
        BASE: {"gpu": 0, "mem_mb": 8192, "runtime": 60, "cpus_per_task": 2}
    }


def test_a_blocked_cell_never_waits_for_a_gpu():
    resources = resources_by_cell(validate_config(layered_config()))[BLOCKED]
    assert {key: resources[key] for key in BLOCKED_SIZES} == BLOCKED_SIZES
    assert resources["slurm_partition"] == "gpu"
    assert "slurm_extra" not in resources


def test_resources_never_reach_a_cells_settings():
    """So editing them reruns nothing: the cells equal those of the config without them."""
    config = validate_config(layered_config())
    plain = layered_config()
    del plain["resources"], plain["engines"]["llamacpp-cpu"]["resources"]
    for entry in plain["cells"]:
        entry.pop("resources")
    with_resources = [cell.to_dict() for cell in build_cells(without_resources(config))]
    assert with_resources == [cell.to_dict() for cell in build_cells(validate_config(plain))]


@pytest.mark.parametrize(
    "resources, key",
    [
        ({"gpus": 1}, "resources"),
        ({"mem_mb": "64G"}, "resources.mem_mb"),
        ({"gpu": -1}, "resources.gpu"),
        ({"runtime": 0}, "resources.runtime"),
    ],
)
def test_bad_resources_name_their_key(resources, key):
    config = tiny_config([{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"}])
    config["engines"]["llamacpp-cpu"]["resources"] = resources
    with pytest.raises(ConfigError, match=f"engines.llamacpp-cpu.{key}"):
        validate_config(config)


def test_the_cell_rule_asks_snakemake_for_them(tmp_path):
    """A dry run: each cell job carries its own resources; unset Slurm keys stay unset."""
    write_config(tmp_path, layered_config())
    proc = run_snakemake(tmp_path, "-n")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    jobs = {}
    for block in (proc.stdout + proc.stderr).split("\nrule ")[1:]:
        lines = dict(line.strip().split(": ", 1) for line in block.splitlines()[1:] if ": " in line)
        if block.startswith("cell:"):
            jobs[lines["wildcards"].removeprefix("cell=")] = lines["resources"]
        else:
            assert "gpu=" not in lines.get("resources", ""), block
    assert "gpu=1" in jobs[BASE] and "mem_mb=64000" in jobs[BASE]
    assert "runtime=30" in jobs[BASE] and "cpus_per_task=2" in jobs[BASE]
    assert "slurm_partition=gpu" in jobs[BASE] and "slurm_extra=--qos=high" in jobs[BASE]
    assert "slurm_account" not in jobs[BASE]
    assert "gpu=0" in jobs[BLOCKED] and "slurm_extra" not in jobs[BLOCKED]


def test_a_rule_declares_each_resource_some_job_sets():
    """As a value where all jobs agree, as a job's lookup where they differ, not at all where
    none sets it (None: the cluster's default) or the rule sets it itself."""
    by_job = {
        "a": {"gpu": 1, "mem_mb": 8192, "slurm_account": None, "machine": 0},
        "b": {"gpu": 0, "mem_mb": 8192, "machine": 0},
    }
    declared = declared_resources(
        list(by_job.values()), lambda wildcards: by_job[wildcards.cell], leave_out={"machine"}
    )
    assert set(declared) == {"gpu", "mem_mb"} and declared["mem_mb"] == 8192
    assert [declared["gpu"](SimpleNamespace(cell=cell)) for cell in by_job] == [1, 0]
