"""Fidelity settings that cannot be honoured are refused while the config is read, naming the
keys (workflow_scripts.config.fidelity): a floor run or a goal on agreement beside a workload
that keeps no outputs, and a goal on a KL figure for a model no engine of the matrix measures
it for (which engines can is their adapter's `perplexity_launches`)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.config import REPO, default_config
from tests.support.pipeline import run_snakemake, write_config
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.engines import adapter_for
from workflow_scripts.vocabulary import ConfigError

SMOL = "smollm2-135m"


def cells_of(config: dict) -> list:
    return build_cells(validate_config(config))


def without_floors(config: dict) -> dict:
    for entry in config["cells"]:
        entry.pop("fidelity_floor", None)
    return config


def natively_served(config: dict) -> dict:
    """Every llama.cpp cell on a `native` llama-server: the build (and its llama-perplexity)
    makes the quants, runs no cell."""
    built = {name for name, engine in config["engines"].items() if engine["launch"] == "build"}
    config["engines"]["native"] = {"kind": "llamacpp", "launch": "native", "binary": "x"}
    for entry in config["cells"]:
        engines = entry["matrix"].get("engine", [])
        entry["matrix"]["engine"] = list(
            dict.fromkeys("native" if e in built else e for e in engines)
        )
    return config


def test_the_default_config_measures_what_its_goal_bounds():
    assert cells_of(default_config())
    assert adapter_for("llamacpp").perplexity_launches == frozenset({"build"})
    assert not adapter_for("vllm").perplexity_launches
    assert not adapter_for("sglang").perplexity_launches


def test_a_floor_run_beside_a_workload_that_keeps_no_outputs_is_refused_naming_both_keys():
    config = default_config()
    config["workloads"]["c4"]["record_outputs"] = False
    with pytest.raises(ConfigError) as error:
        cells_of(config)
    said = str(error.value)
    assert "'cells[1].fidelity_floor'" in said and "'workloads.c4.record_outputs'" in said, said


def test_a_goal_on_agreement_beside_a_workload_that_keeps_no_outputs_is_refused():
    config = without_floors(default_config())
    config["workloads"]["c4"]["record_outputs"] = False
    config["models"][SMOL]["fidelity"] = {"agreement_of_floor_pct": {"min": 99}}
    with pytest.raises(ConfigError) as error:
        cells_of(config)
    said = str(error.value)
    assert f"'models.{SMOL}.fidelity.agreement_of_floor_pct'" in said, said
    assert "'workloads.c4.record_outputs'" in said, said
    # a goal on KL figures alone is measured without outputs: accepted
    config["models"][SMOL]["fidelity"] = {"kld_mean": {"max": 0.05}}
    assert cells_of(config)


@pytest.mark.parametrize(
    ("mutate", "key", "why"),
    [
        (
            lambda c: c["models"][SMOL].update(reference_quant="bf16"),
            f"models.{SMOL}.fidelity.kld_mean",
            "its reference quant 'bf16' is no GGUF file",
        ),
        (
            natively_served,
            f"models.{SMOL}.fidelity.kld_mean",
            "none of the engines that run it (native (llamacpp, launch native), vllm-cpu "
            "(vllm, launch venv)) builds llama-perplexity",
        ),
        (
            lambda c: (
                c["models"][SMOL].pop("fidelity"),
                c.update(fidelity={"same_top_pct": {"min": 90}}),
                c["models"][SMOL].update(reference_quant="bf16"),
            ),
            "fidelity.same_top_pct",
            f"bound agreement_of_floor_pct only in models.{SMOL}.fidelity",
        ),
    ],
    ids=["no GGUF reference", "no engine builds the tool", "matrix-wide goal"],
)
def test_a_kl_goal_no_engine_can_measure_is_refused_naming_the_key(mutate, key, why):
    """Before, the goal's KL objective read "not measured" on every row and the goal was
    judged on the rest."""
    config = default_config()
    mutate(config)
    with pytest.raises(ConfigError) as error:
        cells_of(config)
    said = str(error.value)
    assert f"config key '{key}'" in said and why in said, said


def test_plan_and_a_dry_run_both_refuse_a_kl_goal_no_engine_measures(tmp_path):
    config = default_config()
    config["models"][SMOL]["reference_quant"] = "bf16"
    path = write_config(tmp_path, config)
    plan = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.plan", "--configfile", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    dry = run_snakemake(tmp_path, "-n", timeout=120)
    for proc in (plan, dry):
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out
        assert re.search(rf"config key 'models\.{SMOL}\.fidelity\.kld_mean'.*no GGUF", out), out
        assert "Traceback" not in out, out
    assert not (tmp_path / "results").exists()
