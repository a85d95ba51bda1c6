"""Prove a llama-server binary runs on this machine before any cell uses it.

A binary can build fine and still die at its first matrix product: a CPU (or VM) that
advertises AMX or AVX-512 and then traps on it, a native build from another node. The smoke test
loads a tiny model of our own making whose matrices span the common GGUF weight types (so every
quantized kernel the cells could reach runs once), prefills and decodes a few tokens on two
slots at once, and says how the server ended if it did not answer.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests

from ..paths import cache_dir
from ..process.serve import ServerLaunch
from ..process.server import ServerError, ServerProcess
from ..text import tail
from ..weights.synthetic import LlamaShape, Tokenizer, build_gguf
from .command import ServerCommand

# Every matrix of the tiny model gets one of these, in turn: the storage types the common GGUF
# quants (Q4_0 ... Q8_0, Q2_K ... Q6_K, F16/BF16) are made of.
SMOKE_TYPES = (
    "q4_0", "q4_1", "q5_0", "q5_1", "q8_0",
    "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
    "f16", "bf16",
)  # fmt: skip
# Dimensions that are multiples of 256 (K-quant blocks) and of the AMX/repack tile sizes.
SMOKE_SHAPE = LlamaShape(
    hidden_size=256, layers=2, ffn_size=512, heads=4, kv_heads=4, context_length=1024
)
SMOKE_MODEL_VERSION = 1  # bump when the model's recipe changes: the cache is keyed by it
PREDICT_TOKENS = 8
SLOTS = 2
PROMPT = "The smoke test: prefill a few dozen tokens, then decode on two slots at once. " * 2


@dataclass
class SmokeResult:
    """What one smoke test of one binary showed."""

    passed: bool
    reason: str | None = None
    seconds: float = 0.0
    tokens: int = 0
    types: list[str] = field(default_factory=lambda: list(SMOKE_TYPES))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def matrix_types() -> dict[str, str]:
    """Each 2-D tensor of the smoke model -> its storage type, cycling through SMOKE_TYPES."""
    names = [
        name
        for name, shape in SMOKE_SHAPE.tensors(Tokenizer.byte_level().vocab_size)
        if len(shape) == 2 and name != "token_embd.weight"
    ]
    return {name: SMOKE_TYPES[i % len(SMOKE_TYPES)] for i, name in enumerate(names)}


def smoke_model() -> Path:
    """The tiny mixed-type model, made once per cache (a few hundred KiB, well under a second)."""
    path = cache_dir("smoke") / f"llama-mixed-types-v{SMOKE_MODEL_VERSION}.gguf"
    if path.exists():
        return path
    fd, tmp = tempfile.mkstemp(prefix=".smoke-", suffix=".gguf", dir=path.parent)
    os.close(fd)
    try:
        build_gguf(
            SMOKE_SHAPE,
            Tokenizer.byte_level(),
            tmp,
            dtype="f16",
            seed=SMOKE_MODEL_VERSION,
            name="llmbench-smoke",
            tensor_dtypes=matrix_types(),
        )
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def smoke_argv(program: list[str], model: Path, settings: dict[str, Any], port: int) -> list[str]:
    """A small server: two slots, the engine's threads and GPU offload if it sets them."""
    argv = [*program, "-m", str(model), "-c", str(512 * SLOTS), "--parallel", str(SLOTS)]
    for key, flag in (("threads", "-t"), ("n_gpu_layers", "-ngl")):
        if settings.get(key) is not None:
            argv += [flag, str(settings[key])]
    return [*argv, "--host", "127.0.0.1", "--port", str(port)]


def _complete(base_url: str) -> int:
    resp = requests.post(
        base_url + "/completion",
        json={
            "prompt": PROMPT,
            "n_predict": PREDICT_TOKENS,
            "temperature": 0,
            "ignore_eos": True,
            "cache_prompt": False,
        },
        timeout=120,
    )
    resp.raise_for_status()
    return int(resp.json().get("tokens_predicted") or 0)


def _request_failure(server: ServerProcess, exc: Exception) -> ServerError:
    """A dropped request usually means the server is dying: wait briefly to say of what."""
    if server.proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(timeout=5)
    if not server.alive():
        return ServerError(server.died_message("during the smoke test"))
    return ServerError(f"smoke request failed: {exc}")


def smoke_test(
    program: list[str], settings: dict[str, Any], log_path: Path, ready_timeout_s: float = 180.0
) -> SmokeResult:
    """Start the binary on the smoke model, decode on two slots, stop it; never raises for a
    binary that fails: the result says how it failed."""
    started = time.monotonic()
    model = smoke_model()

    def command_for(port: int) -> ServerCommand:
        argv = smoke_argv(program, model, settings, port)
        return ServerCommand(argv, base_url=f"http://127.0.0.1:{port}")

    launch = ServerLaunch.reserve(command_for, log_path)
    server = launch.server
    try:
        with launch:
            launch.start()
            launch.wait_ready("/health", ready_timeout_s)
            with ThreadPoolExecutor(SLOTS) as pool:
                futures = [pool.submit(_complete, launch.base_url) for _ in range(SLOTS)]
                tokens = []
                for future in futures:
                    try:
                        tokens.append(future.result())
                    except requests.RequestException as exc:
                        raise _request_failure(server, exc) from exc
            if not server.alive():
                raise ServerError(server.died_message("after the smoke test"))
    except (ServerError, OSError) as exc:
        return SmokeResult(False, str(exc), round(time.monotonic() - started, 1))
    seconds = round(time.monotonic() - started, 1)
    if any(count < PREDICT_TOKENS for count in tokens):
        reason = f"decoded {tokens} tokens, expected {PREDICT_TOKENS} per slot:\n{tail(log_path)}"
        return SmokeResult(False, reason, seconds, sum(tokens))
    return SmokeResult(True, None, seconds, sum(tokens))
