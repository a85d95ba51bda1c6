"""The standalone load generator's command line for a workload: what a cell's card and the plan
print, so anyone can rerun the same load by hand against a running server."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..vocabulary import Workload

# Workload fields the CLI takes as `--key-with-dashes VALUE`, in the order printed.
CLIENT_SETTINGS = (
    "num_prompts",
    "concurrency",
    "max_tokens",
    "max_seconds",
    "grace_s",
    "request_rate",
    "temperature",
    "warmup_requests",
    "request_timeout_s",
)
DATASET_FLAGS = (
    ("path", "--dataset-path"),
    ("input_len", "--input-len"),
    ("shuffle_seed", "--shuffle-seed"),
    ("max_prompt_chars", "--max-prompt-chars"),
    ("format", "--trace-format"),
    ("content", "--trace-content"),
    ("time_scale", "--time-scale"),
    ("start_s", "--start-s"),
    ("duration_s", "--duration-s"),
    ("max_turns", "--max-turns"),
    ("think_time_s", "--think-time-s"),
    ("history", "--history"),
)


def _value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def client_argv(
    workload: Workload,
    base_url: str,
    out_dir: str,
    model: str | None = None,
    extra_body: Mapping[str, Any] | None = None,
) -> list[str]:
    """`python -m workflow_scripts.loadgen ...` for a cell's `workload`; `extra_body`: fields
    every request adds (what the cell's engine asks for)."""
    dataset = workload.dataset
    argv = [
        "python",
        "-m",
        "workflow_scripts.loadgen",
        "--base-url",
        base_url,
        "--dataset",
        dataset.kind,
    ]
    if dataset.conversations:
        argv.append("--conversations")
    for key, flag in DATASET_FLAGS:
        if getattr(dataset, key) is not None:
            argv += [flag, _value(getattr(dataset, key))]
    for key in CLIENT_SETTINGS:
        if getattr(workload, key) is not None:
            argv += ["--" + key.replace("_", "-"), _value(getattr(workload, key))]
    if workload.shared_prefix:
        argv += ["--shared-prefix-tokens", str(workload.shared_prefix["tokens"])]
        argv += ["--shared-prefix-count", str(workload.shared_prefix.get("count", 1))]
    if workload.ignore_eos:
        argv.append("--ignore-eos")
    if not workload.record_outputs:
        argv.append("--no-record-outputs")
    if workload.endpoint != "chat":
        argv += ["--endpoint", workload.endpoint]
    if workload.api_key_env:
        argv += ["--api-key-env", workload.api_key_env]
    if model:
        argv += ["--model", model]
    if extra_body:
        argv += [
            "--extra-body",
            json.dumps(dict(extra_body), sort_keys=True, separators=(",", ":")),
        ]
    return [*argv, "--out", out_dir]
