"""The standalone load generator's command line for a workload: what a cell's card and the plan
print, so anyone can rerun the same load by hand against a running server."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# Workload keys the CLI takes as `--key-with-dashes VALUE`, in the order printed.
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
)


def _value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def client_argv(
    workload: Mapping[str, Any],
    base_url: str,
    out_dir: str,
    model: str | None = None,
    extra_body: Mapping[str, Any] | None = None,
) -> list[str]:
    """`python -m workflow_scripts.loadgen ...` for `workload` (a workload mapping of a config);
    `extra_body`: fields every request adds (what the cell's engine asks for)."""
    dataset = workload.get("dataset") or {}
    argv = [
        "python",
        "-m",
        "workflow_scripts.loadgen",
        "--base-url",
        base_url,
        "--dataset",
        str(dataset.get("kind", "sharegpt")),
    ]
    for key, flag in DATASET_FLAGS:
        if dataset.get(key) is not None:
            argv += [flag, _value(dataset[key])]
    for key in CLIENT_SETTINGS:
        if workload.get(key) is not None:
            argv += ["--" + key.replace("_", "-"), _value(workload[key])]
    if workload.get("ignore_eos"):
        argv.append("--ignore-eos")
    if workload.get("endpoint", "chat") != "chat":
        argv += ["--endpoint", str(workload["endpoint"])]
    if workload.get("api_key_env"):
        argv += ["--api-key-env", str(workload["api_key_env"])]
    if model:
        argv += ["--model", model]
    if extra_body:
        argv += [
            "--extra-body",
            json.dumps(dict(extra_body), sort_keys=True, separators=(",", ":")),
        ]
    return [*argv, "--out", out_dir]
