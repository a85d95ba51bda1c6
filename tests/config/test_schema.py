"""The config's one checker for values (workflow_scripts.config.schema): the schema alone, no
Python check after it, refuses each bad value of a workload's `slo` and `search` that
hand-written code used to refuse, naming its key; it fills a search's defaults in; an integer is
an int; and the cross-checks a schema cannot state are left to the Python after it."""

from __future__ import annotations

import copy

import pytest

from tests.support.pipeline import tiny_config, tiny_workload
from tests.support.refusals import names_key
from workflow_scripts.config.schema import check_schema, load_schema
from workflow_scripts.slo.search import SearchSettings
from workflow_scripts.vocabulary import ConfigError

GOAL = {"tpot_ms": {"percentile": 90, "max": 52}}
CONC = {"over": "concurrency", "min": 1, "max": 16}
RATE = {"over": "request_rate", "min": 0.5, "max": 8, "tolerance": 0.05}


def config_of(**workload):
    """A config whose workload `w` (one cell) has `workload`'s keys over a plain one."""
    cells = [{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "w"}]
    return tiny_config(cells, workloads={"w": tiny_workload(**workload)})


def test_a_good_goal_and_search_pass_and_get_the_search_defaults():
    """The control for the refusals below; the defaults are the schema's, read as stated."""
    defaults = load_schema()["$defs"]["search"]["properties"]
    for search in (CONC, RATE):
        config = config_of(slo=GOAL, search=search)
        check_schema(config)
        filled = config["workloads"]["w"]["search"]
        for key in ("max_extensions", "extension_factor"):
            assert filled[key] == defaults[key]["default"], key
        spec = SearchSettings.from_dict(filled)
        assert (spec.max_extensions, spec.extension_factor) == (
            defaults["max_extensions"]["default"],
            defaults["extension_factor"]["default"],
        )


BAD = [
    ({"slo": {**GOAL, "itl_ms": GOAL["tpot_ms"]}}, "slo.itl_ms"),
    ({"slo": {"attainment": 0.9}}, "slo"),
    ({"slo": {"tpot_ms": {"percentile": 90}}}, "slo.tpot_ms.max"),
    ({"slo": {"tpot_ms": {"percentile": 90, "max": 52, "p": 1}}}, "slo.tpot_ms.p"),
    ({"slo": {"tpot_ms": {"percentile": 100, "max": 52}}}, "slo.tpot_ms.percentile"),
    ({"slo": {"tpot_ms": {"percentile": True, "max": 52}}}, "slo.tpot_ms.percentile"),
    ({"slo": {"tpot_ms": {"percentile": 90, "max": 0}}}, "slo.tpot_ms.max"),
    ({"slo": {**GOAL, "attainment": 1}}, "slo.attainment"),
    ({"search": {**CONC, "step": 2}}, "search.step"),
    ({"search": {"min": 1, "max": 4}}, "search.over"),
    ({"search": {**CONC, "over": "num_prompts"}}, "search.over"),
    ({"search": {**CONC, "min": 0}}, "search.min"),
    ({"search": {**CONC, "max": 8.0}}, "search.max"),
    ({"search": {**CONC, "tolerance": 0.1}}, "search.tolerance"),
    ({"search": {k: v for k, v in RATE.items() if k != "tolerance"}}, "search.tolerance"),
    ({"search": {**RATE, "tolerance": 1}}, "search.tolerance"),
    ({"search": {**RATE, "min": 0}}, "search.min"),
    ({"search": {**CONC, "max_extensions": 5}}, "search.max_extensions"),
    ({"search": {**CONC, "max_extensions": 1.5}}, "search.max_extensions"),
    ({"search": {**CONC, "extension_factor": 1}}, "search.extension_factor"),
]


@pytest.mark.parametrize(("bad", "key"), BAD, ids=[key for _, key in BAD])
def test_the_schema_alone_refuses_a_bad_goal_or_search_naming_its_key(bad, key):
    """Each of these was refused by hand-written Python until the schema stated `slo` and
    `search` in full."""
    workload = {"slo": GOAL, "search": CONC, **bad}
    with pytest.raises(ConfigError) as error:
        check_schema(config_of(**workload))
    assert names_key(str(error.value), f"workloads.w.{key}"), str(error.value)


FIDELITY_BAD = [
    ({}, ""),  # no objective
    ({"kld_max": {"max": 1}}, ".kld_max"),  # no such figure
    ({"kld_mean": {"min": 1}}, ".kld_mean.max"),  # the other bound
    ({"same_top_pct": {"min": 90, "max": 99}}, ".same_top_pct.max"),  # both bounds
    ({"same_top_pct": 90}, ".same_top_pct"),  # a number, not a bound
    ({"kld_p99": {"max": "small"}}, ".kld_p99.max"),  # not a number
    ({"kld_p99": {"max": True}}, ".kld_p99.max"),  # a bool is not a number
]


@pytest.mark.parametrize("at", ["fidelity", "models.smollm2-135m.fidelity"])
@pytest.mark.parametrize(("bad", "key"), FIDELITY_BAD, ids=[str(b) for b, _ in FIDELITY_BAD])
def test_the_schema_alone_refuses_a_fidelity_goal_that_means_nothing_naming_its_key(bad, key, at):
    """What FidelityGoal.from_dict refused by hand until it read the goal as the schema states
    it: each refused by the schema, matrix-wide and per model, naming the key."""
    config = copy.deepcopy(config_of())  # its models are shared with other tests' configs
    if at == "fidelity":
        config["fidelity"] = bad
    else:
        config["models"]["smollm2-135m"]["fidelity"] = bad
    with pytest.raises(ConfigError) as error:
        check_schema(config)
    assert names_key(str(error.value), at + key), str(error.value)


def test_a_goal_without_an_objective_says_which_keys_would_do():
    with pytest.raises(ConfigError, match=r"'workloads\.w\.slo': missing: one of ttft_ms, "):
        check_schema(config_of(slo={"attainment": 0.9}))


def test_an_integer_is_an_int_anywhere_in_the_config():
    """JSON Schema counts 8.0 as an integer; a count, a concurrency or a cap is an int."""
    with pytest.raises(ConfigError, match=r"'workloads\.w\.num_prompts': 8\.0 is not of type"):
        check_schema(config_of(num_prompts=8.0))
    check_schema(config_of(num_prompts=8))


@pytest.mark.parametrize(
    ("workload", "key"),
    [
        ({"search": {**CONC, "min": 16, "max": 8}}, "search.max"),  # min above max
        ({"search": {**RATE, "min": 1e-5}}, "search.min"),  # no probe id reads it back
        ({"search": CONC, "concurrency": [1, 2]}, "concurrency"),  # a sweep beside a search
        ({"search": RATE, "request_rate": 2.0}, "request_rate"),  # a fixed rate beside it
    ],
)
def test_what_the_schema_cannot_say_passes_it_and_the_python_after_it_refuses(workload, key):
    """Keys judged together are the Python's after the schema (config.search)."""
    from workflow_scripts.config.matrix import validate_config

    config = config_of(slo=GOAL, num_prompts=64, **workload)
    check_schema(copy.deepcopy(config))
    with pytest.raises(ConfigError, match=rf"config key 'workloads\.w\.{key.replace('.', '[.]')}'"):
        validate_config(config)
