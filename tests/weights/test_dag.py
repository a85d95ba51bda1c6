"""Weights in the Snakemake DAG: one fetch per weights entry however many cells share it, and a
changed revision reruns exactly the cells that use it (drafter weights and a synthetic model's
tokenizer source included). The token never lands in anything the run wrote.

Stand-in: the hub is out of reach here, so the weights jobs download from the local stand-in of
its file API (`fixtures/weights/hub_standin.py`). The cells are not run: their outputs are touched
so that Snakemake records their params, which is what a rerun decision compares.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.fixtures.weights.hub_standin import TINY_REPO, HubStandIn, tiny_repo
from tests.support.pipeline import snakemake_argv

pytestmark = pytest.mark.standin

TOKEN = "hf_dagSecretToken9876543210"
ENGINE = "llamacpp-cpu"
TINY = f"tiny__{ENGINE}__q4_k_m__none__w"
TINY_MTP = f"tiny__{ENGINE}__q4_k_m__mtp__w"
OTHER = f"other__{ENGINE}__q8_0__none__w"
SYN = f"syn__{ENGINE}__f16__none__w"


def hf(revision: str, pattern: str, filename: str) -> dict:
    return {
        "source": "hf",
        "repo": TINY_REPO,
        "revision": revision,
        "patterns": [pattern],
        "filename": filename,
    }


def matrix(tiny_revision: str = "v1.0", mtp_revision: str = "v1.0") -> dict:
    return {
        "models": {
            "tiny": {
                "quants": {
                    "q4_k_m": {"weights": hf(tiny_revision, "*Q4_K_M.gguf", "tiny-Q4_K_M.gguf")}
                }
            },
            "tiny-mtp": {
                "quants": {"q8_0": {"weights": hf(mtp_revision, "*Q8_0.gguf", "tiny-Q8_0.gguf")}}
            },
            "other": {"quants": {"q8_0": {"weights": hf("main", "*Q8_0.gguf", "tiny-Q8_0.gguf")}}},
            "syn": {
                "quants": {
                    "f16": {
                        "weights": {
                            "source": "synthetic",
                            "tokenizer_from": {"model": "tiny"},
                            "shape": {
                                "hidden_size": 64,
                                "layers": 2,
                                "ffn_size": 128,
                                "heads": 4,
                                "kv_heads": 2,
                                "context_length": 512,
                            },
                        }
                    }
                }
            },
        },
        "engines": {ENGINE: {"kind": "llamacpp", "launch": "native", "binary": "llama-server"}},
        "drafters": {"mtp": {"kind": "draft-mtp", "model": "tiny-mtp"}},
        "workloads": {
            "w": {
                "dataset": {"kind": "random", "input_len": 16, "output_len": 8},
                "num_prompts": 2,
                "concurrency": 1,
                "max_tokens": 8,
            }
        },
        "cells": [
            {
                "matrix": {
                    "model": ["tiny"],
                    "engine": [ENGINE],
                    "drafter": ["none", "mtp"],
                    "workload": ["w"],
                }
            },
            {"model": "other", "engine": ENGINE, "workload": "w"},
            {"model": "syn", "engine": ENGINE, "workload": "w"},
        ],
    }


def snakemake(workdir: Path, *args: str) -> str:
    proc = subprocess.run(
        snakemake_argv(workdir, *args), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


CELL_TARGETS = [f"results/cells/{cell}/metrics.json" for cell in (TINY, TINY_MTP, OTHER, SYN)]


def planned(workdir: Path) -> set[str]:
    """`rule:wildcards` of the jobs a dry run of the four cells would run."""
    jobs, rule = set(), None
    for line in snakemake(workdir, "-n", *CELL_TARGETS).splitlines():
        line = line.strip()
        if line.startswith(("rule ", "localrule ")):
            rule = line.split()[1].rstrip(":")
        elif line.startswith("wildcards:") and rule:
            jobs.add(f"{rule}:{line.split('=', 1)[1]}")
    return jobs


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    work = tmp_path / "work"
    work.mkdir()
    (work / "matrix.yaml").write_text(yaml.safe_dump(matrix()))
    return work


def test_changed_revision_reruns_exactly_its_cells(workdir, tmp_path, monkeypatch):
    every_job = planned(workdir)
    weights_jobs = {job for job in every_job if job.startswith("weights:")}
    # Four cells, four weights entries: the two `tiny` cells share one fetch; the drafter's
    # weights and the synthetic model's tokenizer source are entries like any other.
    assert weights_jobs == {
        "weights:tiny__q4_k_m",
        "weights:tiny-mtp__q8_0",
        "weights:other__q8_0",
        "weights:syn__f16",
    }

    with HubStandIn(tiny_repo()) as hub:
        hub.faults.required_token = TOKEN
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        snakemake(
            workdir,
            *(
                f"results/weights/{job.split(':')[1]}.json"
                for job in sorted(weights_jobs - {"weights:syn__f16"})
            ),
        )
    manifests = {
        p.stem: yaml.safe_load(p.read_text()) for p in (workdir / "results/weights").glob("*.json")
    }
    assert {m.get("status") for m in manifests.values()} == {None}, manifests
    assert manifests["tiny__q4_k_m"]["revision_sha"] != manifests["other__q8_0"]["revision_sha"]
    fetched = [s.path for s in hub.downloads()]
    assert sorted(p.rsplit("/", 1)[1] for p in fetched) == ["tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf"]

    written = [
        p
        for root in (workdir, tmp_path / "hf-home", tmp_path / "cache")
        for p in root.rglob("*")
        if p.is_file()
    ]
    assert any(".snakemake/metadata" in str(p) for p in written)  # recorded params included
    for path in written:
        assert TOKEN.encode() not in path.read_bytes(), path

    # Mark the rest done without running it, so Snakemake records every job's params.
    for line in snakemake(workdir, "--summary", *CELL_TARGETS).splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) > 4 and fields[4] == "missing":
            (workdir / fields[0]).parent.mkdir(parents=True, exist_ok=True)
            (workdir / fields[0]).write_text("{}\n")
    snakemake(workdir, "--touch", *CELL_TARGETS)
    assert planned(workdir) == set()

    (workdir / "matrix.yaml").write_text(yaml.safe_dump(matrix(tiny_revision="main")))
    assert planned(workdir) == {
        "weights:tiny__q4_k_m",
        "weights:syn__f16",
        f"cell:{TINY}",
        f"cell:{TINY_MTP}",
        f"cell:{SYN}",
    }
    (workdir / "matrix.yaml").write_text(yaml.safe_dump(matrix(mtp_revision="main")))
    assert planned(workdir) == {"weights:tiny-mtp__q8_0", f"cell:{TINY_MTP}"}
