"""A small config whose cells span every kind of content and the prefix cache on and off, for
the content, conversation and prefix-cache tests: loaded through the real config code
(`load_cells`), with hand-made metrics for its cells. Nothing here launches a server; the
weights and binaries it names do not exist (the trace files are the test fixtures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from workflow_scripts.config.matrix import load_cells
from workflow_scripts.loadgen.metrics import summarize_ms
from workflow_scripts.vocabulary import Cell, Status, identity


def _load(concurrency: int | list[int], **dataset: Any) -> dict[str, Any]:
    return {"dataset": dataset, "num_prompts": 4, "concurrency": concurrency, "max_tokens": 8}


def _engine(kind: str, **settings: Any) -> dict[str, Any]:
    return {"kind": kind, "launch": "native", "binary": f"{kind}-server", "settings": settings}


# Each engine beside the same entry with its adapter's prefix-cache settings turned off
# (workflow_scripts/engines: llamacpp, vllm, sglang `prefix_cache_off`).
ENGINES = {
    "lc": _engine("llamacpp", ctx_size=4096, threads=2),
    "lc-off": _engine("llamacpp", ctx_size=4096, threads=2, cache_prompt=False, cache_ram=0),
    "vl": _engine("vllm", max_model_len=4096, dtype="bfloat16"),
    "vl-off": _engine("vllm", max_model_len=4096, dtype="bfloat16", enable_prefix_caching=False),
    "sg": _engine("sglang", context_length=4096, mem_fraction_static=0.8),
    "sg-off": _engine(
        "sglang", context_length=4096, mem_fraction_static=0.8, disable_radix_cache=True
    ),
}
# A trace's file is read when the config is validated: the fixtures'.
_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
TRACES = {
    "mooncake": str(_FIXTURES / "mooncake.jsonl"),
    "burstgpt": str(_FIXTURES / "burstgpt.csv"),
}
# content label -> the workload that sends it (DatasetSettings.content_label)
WORKLOADS = {
    "chat": _load(2, kind="sharegpt"),
    "conv": _load(2, kind="sharegpt", conversations=True, max_turns=3),
    "code": _load(2, kind="humaneval"),
    "rand": _load(2, kind="random", input_len=8),
    "file": _load(2, kind="jsonl", path="prompts.jsonl"),
    "trace-code": _load(
        2, kind="trace", format="mooncake", path=TRACES["mooncake"], content="humaneval"
    ),
    "trace-chat": _load(2, kind="trace", format="burstgpt", path=TRACES["burstgpt"]),
    "sweep": _load([1, 2], kind="humaneval"),  # its points are cells with a `sweep`
}
CONFIG = {
    "models": {
        "tiny": {
            "company": "Example Labs",
            "quants": {
                "q4_0": {"weights": {"source": "local", "path": "w/tiny-q4_0.gguf"}},
            },
        }
    },
    "engines": ENGINES,
    "drafters": {"ngram": {"kind": "ngram-simple", "n_max": 8}},
    "workloads": WORKLOADS,
    "cells": [
        {
            "matrix": {
                "model": ["tiny"],
                "quant": ["q4_0"],
                "engine": ["lc"],
                "drafter": ["none", "ngram"],
                "workload": ["chat", "code", "rand", "sweep"],
            }
        },
        {
            "matrix": {
                "model": ["tiny"],
                "quant": ["q4_0"],
                "engine": ["lc", "lc-off"],
                "drafter": ["none"],
                "workload": ["conv", "file", "trace-code", "trace-chat"],
            }
        },
        {
            "matrix": {
                "model": ["tiny"],
                "quant": ["q4_0"],
                "engine": ["lc-off", "vl", "vl-off", "sg", "sg-off"],
                "drafter": ["none"],
                "workload": ["chat"],
            }
        },
    ],
}


def content_cells(tmp_path: Path) -> dict[str, Cell]:
    """The config's cells by id, in config order, loaded from a written YAML."""
    path = tmp_path / "content.yaml"
    path.write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    return {cell.id: cell for cell in load_cells(path)}


def cell_id(engine: str, drafter: str, workload: str) -> str:
    return f"tiny__{engine}__q4_0__{drafter}__{workload}"


def done_metrics(cell: Cell, **figures: Any) -> dict[str, Any]:
    """A finished cell's metrics.json as the cell rule starts it (`identity`), with `figures`
    over it; what a table reads and nothing it does not."""
    return {**identity(cell), "status": Status.DONE, "completed": 4, **figures}


def turn(number: int, ttft_s: list[float], tpot_s: list[float], **extra: Any) -> dict[str, Any]:
    """One metrics.json `by_turn` entry, its distributions summarized as loadgen.metrics does."""
    return {
        "turn": number,
        "requests": len(ttft_s),
        "ttft_ms": summarize_ms(ttft_s),
        "tpot_ms": summarize_ms(tpot_s),
        **extra,
    }
