"""A @job_function's signature reaches the installed Snakemake once, not at every call: if a
Snakemake release drops the hook, this fails rather than the saving quietly going away."""

import inspect

import snakemake.common

from tests.support.config import default_config
from workflow_scripts.workflow.dag import build_dag
from workflow_scripts.workflow.job_functions import job_function


def test_snakemake_reads_a_job_functions_signature_without_inspecting_it(monkeypatch):
    @job_function
    def cell_inputs(wildcards, attempt):
        return {"engine": f"{wildcards}-{attempt}"}

    def no_signature(*args, **kwargs):
        raise AssertionError("Snakemake inspected the signature again")

    monkeypatch.setattr(snakemake.common.inspect, "signature", no_signature)
    aux = snakemake.common.get_input_function_aux_params(
        cell_inputs, {"attempt": 2, "input": [], "threads": 1}
    )
    assert aux == {"attempt": 2}
    assert "groupid" not in snakemake.common.get_function_params(cell_inputs)
    assert cell_inputs("c1", **aux) == {"engine": "c1-2"}


def test_a_job_function_keeps_its_own_signature():
    @job_function
    def resource(wildcards, threads=1, **rest):
        return threads

    params = snakemake.common.get_function_params(resource)
    assert list(params) == ["wildcards", "threads", "rest"]
    assert params["rest"].kind is inspect.Parameter.VAR_KEYWORD
    assert resource(None, threads=3) == 3


def test_the_cell_rules_per_job_resources_reach_snakemake_with_their_signature(
    empty_workdir, monkeypatch
):
    """config/ builds a rule's resources without knowing Snakemake; the workflow side makes each
    per-job lookup among them a job function. The default's cells differ in memory, CPUs and
    machine, so those three are functions of the job."""
    dag = build_dag(default_config())
    functions = {k: v for k, v in dag.cell_rule_resources().items() if callable(v)}
    assert sorted(functions) == ["cpus_per_task", "machine", "mem_mb"]

    def no_signature(*args, **kwargs):
        raise AssertionError("Snakemake inspected the signature again")

    monkeypatch.setattr(snakemake.common.inspect, "signature", no_signature)
    for function in functions.values():
        assert list(snakemake.common.get_function_params(function)) == ["wildcards"]
