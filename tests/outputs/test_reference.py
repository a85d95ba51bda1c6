"""The reference-only summary: a config's published figures listed without running anything."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.support.outputs import BASE, BLOCKED, CONFIG, REPO

GB10 = REPO / "configs" / "gb10-gemma4.yaml"
VLLM_MTP = "gemma-4-12b__vllm-nightly__nvfp4__mtp-assistant__sharegpt-c32"
# The published decode tok/s, one per unblocked cell (the cards' decode_toks; REFERENCE.md rounds
# the llama.cpp MTP cell's 202.18 to 202.2).
PUBLISHED_DECODE_TOK_S = [
    195.25,
    159.29,
    153.02,
    202.18,
    145.48,
    49.24,
    503.81,
    782.37,
    386.56,
    399.82,
]


def reference_only(configfile, out, cwd) -> subprocess.CompletedProcess:
    argv = [
        sys.executable,
        "-m",
        "workflow_scripts.outputs.reference",
        "--configfile",
        str(configfile),
        "--reference-only",
        "--out",
        str(out),
    ]
    # This tree's code, whatever the environment has installed.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_reference_only_lists_published_figures_without_running(tmp_path):
    proc = reference_only(CONFIG, tmp_path / "ref", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "ref").iterdir()) == [
        "index.csv",
        "index.md",
        "reference.csv",
        "reference.md",
        "spec_gain.csv",
        "spec_gain.md",
        "summary.csv",
        "summary.md",
    ]
    assert not (tmp_path / "results").exists()  # nothing ran, nothing was measured
    reference = pd.read_csv(tmp_path / "ref" / "reference.csv").set_index("cell")
    assert reference.loc[BASE, "decode_tok_s"] == 120.0
    assert reference.loc[BASE, "prefill_tok_s"] == 900.0
    assert reference.loc[BLOCKED, "status"] == "blocked: a test cell that is listed, never run"
    summary = pd.read_csv(tmp_path / "ref" / "summary.csv").set_index("cell")
    assert summary.loc[BASE, "ref_decode_tok_s"] == 120.0
    assert pd.isna(summary.loc[BASE, "decode_tok_s"])  # measured column stays empty
    assert summary.loc[BASE, "status"] == "not run"
    assert summary.loc[BLOCKED, "status"] == "blocked"
    index_md = (tmp_path / "ref" / "index.md").read_text()
    assert "Decode tok/s (published)" in index_md
    assert "card.md" not in index_md  # no cards exist to link
    assert "120.00" in proc.stdout


def test_reference_only_refuses_a_bad_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: {}\n")
    proc = reference_only(bad, tmp_path / "ref", tmp_path)
    assert proc.returncode == 2
    assert "config key" in proc.stderr


@pytest.mark.skipif(not GB10.exists(), reason="configs/gb10-gemma4.yaml is not in this tree")
def test_gb10_reference_only_lists_every_published_cell(tmp_path):
    proc = reference_only(GB10, tmp_path / "ref", tmp_path)
    assert proc.returncode == 0, proc.stderr
    reference = pd.read_csv(tmp_path / "ref" / "reference.csv")
    assert sorted(reference["decode_tok_s"].dropna()) == sorted(PUBLISHED_DECODE_TOK_S)
    blocked = reference[reference["status"].fillna("").str.startswith("blocked")]
    assert len(blocked) == 1 and "EAGLE3" in blocked["status"].iloc[0]
    mtp = reference.set_index("cell").loc[VLLM_MTP]
    assert (mtp["prefill_tok_s"], mtp["ttft_median_ms"], mtp["tpot_median_ms"]) == (
        903.43,
        273.2,
        35.8,
    )
    assert mtp["peak_mem_gib"] == 108.3
