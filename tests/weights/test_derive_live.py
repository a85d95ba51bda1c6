"""The quant axis for real: SmolLM2-135M's Q4_1 GGUF (its registry package) -> bf16 safetensors
(transformers, in the conversion venv) -> f16 GGUF (the pinned llama.cpp tree's converter) ->
q8_0 and q4_0 (that build's llama-quantize), made by the pipeline's own weights steps (Snakemake,
engine step included), then each GGUF served by the built llama-server.

What must hold, and why:
- every GGUF of the chain sees the same chat prompt as the same number of tokens
  (`usage.prompt_tokens`): tokenizer and chat template survived both conversions; text with
  numbers is split into the same tokens by each GGUF and by the Hugging Face tokenizer of the
  bf16 copy (the one vLLM loads);
- the f16 gives the q4_1 source's greedy text: it holds the source's own weights, dequantized
  (bf16 keeps each 4-bit value of Q4_1 to within its rounding), so short greedy text agrees
  (measured here and by the issue's author). The q8_0 and q4_0 are quantized anew, from a
  model that was itself 4-bit: they are other models, so their text may part from it; only
  that they answer is asserted, and their text is printed;
- a weights step run again with the same source and tool converts nothing (a cache hit).

Uses the shared cache (the conversions are kept there, like every weights entry): the first run
converts (minutes here, mostly the conversion venv's install), later runs find them.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import requests

from tests.support.engines import smollm2_chain_config
from tests.support.pipeline import run_snakemake, write_config
from workflow_scripts.process.ports import reserve_port
from workflow_scripts.process.server import ServerProcess, running, wait_ready

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
ENGINE = "llamacpp-cpu"
CHAIN = ("q4_1", "bf16", "f16", "q8_0", "q4_0")
GGUFS = ("q4_1", "f16", "q8_0", "q4_0")
PROMPT = "What is the capital of France? Answer in one short sentence."
MAX_TOKENS = 24
DIGITS = "In 1984, 3,442 people paid $12.50 each; call 555-0199 before 10:45 on 2026-11-30."


def chain_config() -> dict:
    return smollm2_chain_config(list(GGUFS), ENGINE)


def manifest_target(quant: str) -> str:
    """As Snakemake names it (relative to the workdir)."""
    return f"results/weights/{MODEL}__{quant}.json"


def manifest_path(workdir: Path, quant: str) -> Path:
    return workdir / manifest_target(quant)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """The chain made by the weights steps: workdir, manifests by quant, the engine stamp."""
    workdir = tmp_path_factory.mktemp("derive")
    write_config(workdir, chain_config())
    started = time.monotonic()
    proc = run_snakemake(workdir, *(manifest_target(q) for q in CHAIN), timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(f"\nchain made (or found) in {time.monotonic() - started:.0f} s")
    manifests = {q: json.loads(manifest_path(workdir, q).read_text()) for q in CHAIN}
    for quant, manifest in manifests.items():
        assert manifest.get("status") != "failed", (
            quant,
            manifest.get("reason"),
            (workdir / "logs" / "weights").iterdir(),
        )
        resolved = manifest["resolved"]
        if manifest["source"] == "derived":
            print(
                f"{quant}: {manifest['total_bytes'] / 1e6:.0f} MB, converted in "
                f"{resolved['convert_s']} s; {manifest['provenance']}"
            )
    stamp = json.loads((workdir / "results" / "engines" / f"{ENGINE}.json").read_text())
    return workdir, manifests, stamp


def test_every_derived_manifest_names_its_source_tools_and_files(chain):
    workdir, manifests, stamp = chain
    bf16, f16, q8 = manifests["bf16"], manifests["f16"], manifests["q8_0"]
    source_sha = manifests["q4_1"]["files"][0]["sha256"]
    assert bf16["resolved"]["source"]["files"][0]["sha256"] == source_sha
    assert bf16["provenance"] == (
        "bf16, dequantized by transformers 5.17.0 from the q4_1 GGUF "
        "SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    assert f16["provenance"].startswith(
        "f16, converted by convert_hf_to_gguf.py of llama-cpp-python 0.3.36"
    )
    assert f16["provenance"].endswith(bf16["provenance"])
    assert q8["provenance"].startswith(
        "q8_0, quantized by llama-quantize of llama-cpp-python "
        "0.3.36 (vendor/llama.cpp) from the f16 GGUF "
        f"{MODEL}-f16.gguf; f16, converted"
    )
    assert q8["resolved"]["tools"]["llama_cpp"]["build_key"] == stamp["key"]
    assert bf16["resolved"]["tools"]["packages"]["transformers"] == "5.17.0"
    assert bf16["resolved"]["tools"]["packages"]["torch"].startswith("2.13.0")
    for quant in ("bf16", "f16", "q8_0", "q4_0"):
        for entry in manifests[quant]["files"]:
            assert len(entry["sha256"]) == 64 and entry["size"] > 0
    names = {entry["name"] for entry in bf16["files"]}
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= names
    config = json.loads((Path(bf16["primary"]) / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "bfloat16"
    assert f16["primary"].endswith(".gguf") and q8["primary"].endswith(".gguf")


def test_the_chat_template_and_special_tokens_travel_down_the_chain(chain):
    from gguf import GGUFReader

    _, manifests, _ = chain

    def metadata(path: str) -> dict:
        fields = GGUFReader(path).fields
        out = {}
        for key in (
            "tokenizer.chat_template",
            "tokenizer.ggml.bos_token_id",
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.add_bos_token",
            "tokenizer.ggml.model",
            "tokenizer.ggml.pre",
        ):
            field = fields.get(key)
            out[key] = field.contents() if field is not None else None
        return out

    original = metadata(manifests["q4_1"]["primary"])
    assert original["tokenizer.chat_template"], "the source GGUF carries a template"
    template = (Path(manifests["bf16"]["primary"]) / "chat_template.jinja").read_text()
    assert template.strip() == original["tokenizer.chat_template"].strip()
    tokenizer_config = json.loads(
        (Path(manifests["bf16"]["primary"]) / "tokenizer_config.json").read_text()
    )
    assert tokenizer_config["eos_token"] == "<|im_end|>"  # the GGUF's eos, not transformers'
    for quant in ("f16", "q8_0", "q4_0"):
        assert metadata(manifests[quant]["primary"]) == original, quant


def chat(binary: str, gguf: str, log_path: Path) -> dict:
    """One greedy chat completion from a fresh llama-server on `gguf`, and how it tokenizes
    DIGITS; always torn down."""
    with reserve_port() as lease:
        argv = [
            binary,
            "-m",
            gguf,
            "-c",
            "1024",
            "-t",
            "1",
            "--parallel",
            "1",
            "--host",
            "127.0.0.1",
            "--port",
            str(lease.port),
        ]
        server = ServerProcess(argv, log_path)
        base_url = f"http://127.0.0.1:{lease.port}"
        with running(server):
            wait_ready(server, base_url, "/health", 180)
            resp = requests.post(
                base_url + "/v1/chat/completions",
                timeout=300,
                json={
                    "messages": [{"role": "user", "content": PROMPT}],
                    "max_tokens": MAX_TOKENS,
                    "temperature": 0,
                    "seed": 0,
                },
            )
            resp.raise_for_status()
            body = resp.json()
            tokens = requests.post(base_url + "/tokenize", json={"content": DIGITS}, timeout=60)
            tokens.raise_for_status()
    return {
        "prompt_tokens": body["usage"]["prompt_tokens"],
        "text": body["choices"][0]["message"]["content"],
        "digits": tokens.json()["tokens"],
    }


def hf_tokens(manifest: dict, text: str) -> list[int]:
    """`text` as the derived Hugging Face tokenizer (what vLLM loads) encodes it, run in the
    conversion venv (transformers is not a pipeline dependency)."""
    python = Path(manifest["resolved"]["tools"]["venv"]) / "bin" / "python"
    script = (
        "import json, sys; from transformers import AutoTokenizer; "
        "t = AutoTokenizer.from_pretrained(sys.argv[1]); "
        "print(json.dumps(t.encode(sys.argv[2], add_special_tokens=False)))"
    )
    proc = subprocess.run(
        [str(python), "-c", script, manifest["primary"], text],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_gguf_of_the_chain_serves_the_prompt_as_the_same_tokens(chain, tmp_path):
    _, manifests, stamp = chain
    answers = {
        q: chat(stamp["binary"], manifests[q]["primary"], tmp_path / f"{q}.log") for q in GGUFS
    }
    for quant, answer in answers.items():
        print(f"{quant}: {answer['prompt_tokens']} prompt tokens -> {answer['text']!r}")
    assert {a["prompt_tokens"] for a in answers.values()} == {answers["q4_1"]["prompt_tokens"]}
    assert answers["f16"]["text"] == answers["q4_1"]["text"]
    assert all(answers[q]["text"].strip() for q in ("q8_0", "q4_0"))
    # Numbers split digit by digit, as SmolLM's pre-tokenizer does, in every GGUF of the chain
    # and in the Hugging Face tokenizer vLLM would load (transformers alone would not split).
    original = answers["q4_1"]["digits"]
    assert len(original) > len(DIGITS.split())
    assert all(a["digits"] == original for a in answers.values())
    assert hf_tokens(manifests["bf16"], DIGITS) == original


def test_a_rerun_with_the_same_source_and_tool_converts_nothing(chain):
    """The q8_0 step run again (its manifest removed, so Snakemake must run it): the cached
    output is found by its key, the record is the first one, and it takes seconds."""
    workdir, manifests, _ = chain
    manifest_path(workdir, "q8_0").unlink()
    started = time.monotonic()
    proc = run_snakemake(workdir, manifest_target("q8_0"), timeout=600)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rule weights" in proc.stdout + proc.stderr
    again = json.loads(manifest_path(workdir, "q8_0").read_text())
    assert again["resolved"] == manifests["q8_0"]["resolved"]  # made_at included: not remade
    assert again["files"] == manifests["q8_0"]["files"]
    print(f"q8_0 step again: {elapsed:.1f} s (Snakemake included), no conversion")
