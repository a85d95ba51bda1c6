"""The fidelity part of the DAG (workflow_scripts.workflow.fidelity_steps): an object built from
the inputs it declares, held by the Dag, whose KL divergence steps are found once."""

from __future__ import annotations

import json
import sys

import pytest

from tests.support.config import default_config
from workflow_scripts.fidelity import kld_plan as kld
from workflow_scripts.fidelity.kld_plan import KldModel, failure_key
from workflow_scripts.fidelity.pairs import FidelitySettings
from workflow_scripts.workflow.dag import build_dag
from workflow_scripts.workflow.fidelity_steps import FidelitySteps, UnknownCell


def rule_path(rule: str, key: str, **wildcards: str) -> str:
    return f"out/{rule}/{key}" + "".join(f"/{name}={value}" for name, value in wildcards.items())


def test_the_steps_answer_from_their_declared_inputs_alone():
    """Hand-made inputs, no config and no Dag: one model, its f16 reference and one quant, a
    step that failed twice, a build setting of the engine."""
    steps = FidelitySteps(
        models={"m": {"quants": {"f16": {}, "q4": {}}}},
        engines={"cpu": {"build": {"package": "llama-cpp-python"}}},
        settings=FidelitySettings(references={"m": "f16"}, goals={"m": None}),
        cells={},
        pairs={},
        kld={"m": KldModel("m", "f16", "cpu", ("q4",))},
        failed_attempts={failure_key("m", "q4"): 2},
        path=rule_path,
    )
    assert steps.kld_targets() == ["out/fidelity_kld/record/weights=m__q4"]
    assert steps.fidelity_failures("m", "q4") == 2 and steps.fidelity_failures("m", "f16") == 0
    step = json.loads(steps.fidelity_step("m", "q4"))
    assert (step["quant"], step["reference_quant"], step["engine"]) == ("q4", "f16", "cpu")
    assert step["build"] == {"package": "llama-cpp-python"}
    assert steps.fidelity_kld_inputs("m__q4")["base"] == "out/fidelity_base/record/model=m"
    assert steps.card_fidelity("any") == {} and steps.floor_reference("any") is None
    with pytest.raises(UnknownCell, match="model 'other' has no KL divergence step"):
        steps.kld_plan("other")
    with pytest.raises(UnknownCell, match="model 'm' has no quant 'q8'"):
        steps.kld_quant("m__q8")


def test_the_kl_divergence_steps_are_found_once_per_dag(empty_workdir, monkeypatch):
    """fidelity.kld_plan.kld_models is counted wherever a module of the package took it in: building
    the default's DAG and asking for its weights, its KL targets, each step's inputs and every
    card's comparison runs it once."""
    calls = []
    found = kld.kld_models

    def counted(*args):
        calls.append(args)
        return found(*args)

    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if name.startswith("workflow_scripts") and getattr(module, "kld_models", None) is found:
            monkeypatch.setattr(module, "kld_models", counted)
    dag = build_dag(default_config())
    steps = dag.fidelity_steps
    assert steps.kld_targets() == [
        "results/fidelity/smollm2-135m__q8_0.json",
        "results/fidelity/smollm2-135m__q4_0.json",
    ]
    assert "smollm2-135m__f16" in dag.weights  # the reference's weights: no cell runs f16
    assert steps.fidelity_base_inputs("smollm2-135m")["engine"].endswith("llamacpp-cpu.json")
    compared = [cell for cell in dag.cells if "kld" in steps.card_fidelity(cell)]
    assert compared == [
        "smollm2-135m__llamacpp-cpu__q8_0__none__c4",
        "smollm2-135m__llamacpp-cpu__q4_0__none__c4",
    ]
    assert len(calls) == 1
