"""The plan command: exact server and client commands per cell, nothing run. That every published
GB10 command comes out token for token is tests/pipeline/test_published_commands.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.support.engines import REPO
from workflow_scripts.config.matrix import load_cells
from workflow_scripts.config.plan import main

SEED_CONFIG = REPO / "configs" / "gb10-gemma4.yaml"

LLAMACPP_MTP_CELL = "gemma-4-12b__llamacpp-cuda__q4_k_m-unsloth__mtp__sharegpt-mtp-c32"
VLLM_MTP_CELL = "gemma-4-12b__vllm-nightly__nvfp4__mtp-assistant__sharegpt-c32"


@pytest.fixture
def plain_env(monkeypatch, tmp_path):
    """No manifests (a fresh checkout), the default hub cache, no token."""
    for name in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def plans(capsys, *args: str) -> dict[str, dict]:
    assert main(["--configfile", str(SEED_CONFIG), "--json", *args]) == 0
    out = capsys.readouterr().out
    return {p["cell"]: p for p in map(json.loads, out.splitlines())}


def test_every_cell_is_planned_and_the_blocked_one_says_why(plain_env, capsys):
    cells = load_cells(SEED_CONFIG)
    planned = plans(capsys)
    # every cell, then each latency-goal search's first probe (docs/slo.md): its min, c1
    probes = [
        f"gemma-4-12b__{e}__{d}__sharegpt-goal-c1"
        for e, d in (
            ("llamacpp-cuda__q4_k_m", "none"),
            ("vllm-nightly__nvfp4", "none"),
            ("vllm-nightly__nvfp4", "mtp-assistant"),
        )
    ]
    assert list(planned) == [c.id for c in cells] + probes
    assert "first probe of the search" in planned[probes[0]]["notes"][-1]
    assert len(cells) == 11
    blocked = [p for p in planned.values() if p["blocked"]]
    assert [p["cell"] for p in blocked] == [
        "gemma-4-12b__vllm-nightly__nvfp4__eagle3__sharegpt-c32"
    ]
    assert "EAGLE3" in blocked[0]["blocked"] and blocked[0]["server"] == []
    for plan in planned.values():
        if plan["blocked"]:
            continue
        assert plan["server"][:2] == ["docker", "run"]
        assert plan["teardown"] == ["docker", "rm", "-f", "llmbench-" + plan["cell"]]
        client = plan["client"]
        assert client[:3] == ["python", "-m", "workflow_scripts.loadgen"]
        port = client[client.index("--base-url") + 1].rsplit(":", 1)[1]
        assert f"127.0.0.1:{port}:" in " ".join(plan["server"])
        assert client[client.index("--out") + 1] == f"results/cells/{plan['cell']}"


def test_published_figures_ride_along_as_reference(plain_env, capsys):
    planned = plans(capsys)
    assert planned[LLAMACPP_MTP_CELL]["reference"]["decode_tok_s"] == 202.18
    assert planned[LLAMACPP_MTP_CELL]["reference"]["errors"] == 18
    assert planned[VLLM_MTP_CELL]["reference"]["decode_tok_s"] == 782.37
    published = [p for c, p in planned.items() if not p["blocked"] and "sharegpt-goal" not in c]
    assert all(p["reference"].get("decode_tok_s") for p in published)  # a search's probe: none


def test_client_command_for_the_vllm_cell(plain_env, capsys):
    client = plans(capsys, "--cell", VLLM_MTP_CELL)[VLLM_MTP_CELL]["client"]
    assert client == [
        "python",
        "-m",
        "workflow_scripts.loadgen",
        "--base-url",
        "http://127.0.0.1:8000",
        "--dataset",
        "sharegpt",
        "--num-prompts",
        "1000",
        "--concurrency",
        "32",
        "--max-tokens",
        "256",
        "--max-seconds",
        "900",
        "--grace-s",
        "30",
        "--temperature",
        "0",
        "--warmup-requests",
        "2",
        "--request-timeout-s",
        "600",
        "--model",
        "RedHatAI/gemma-4-12B-it-NVFP4",
        "--out",
        f"results/cells/{VLLM_MTP_CELL}",
    ]


def test_fetched_weights_show_their_real_paths_and_revision(plain_env, capsys, tmp_path):
    sha = "c" * 40
    weights = tmp_path / "results" / "weights"
    weights.mkdir(parents=True)
    (weights / "gemma-4-12b__nvfp4.json").write_text(
        json.dumps({"primary": "/hub/snapshot", "revision_sha": sha, "hub_cache": "/data/hf/hub"})
    )
    server = plans(capsys, "--cell", VLLM_MTP_CELL)[VLLM_MTP_CELL]["server"]
    assert "/data/hf:/root/.cache/huggingface" in server
    assert server[server.index("RedHatAI/gemma-4-12B-it-NVFP4") + 1 :][:2] == ["--revision", sha]


def test_unknown_cell_and_bad_config_exit_2(plain_env, tmp_path, capsys):
    assert main(["--configfile", str(SEED_CONFIG), "--cell", "nope"]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: {}\n")
    assert main(["--configfile", str(bad)]) == 2
    assert "config key" in capsys.readouterr().err


def test_plan_runs_as_a_module_on_the_default_config():
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.plan", "--configfile", "config.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    # 11 cells and 2 floor runs, 8 sweep points and 4 floor runs, 2 first probes
    assert proc.stdout.count("# server") == 27
    # the built binary once the engine step ran, else a placeholder explained under the command
    assert re.search(r"llama-server>? -m ", proc.stdout), proc.stdout
    assert "<llama-server>" not in proc.stdout or "passes its smoke test" in proc.stdout
    assert "--spec-type ngram-simple" in proc.stdout


def test_snakemake_dry_run_plans_every_non_blocked_cell(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path),
            "--configfile",
            str(SEED_CONFIG),
            "--cores",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = proc.stdout + proc.stderr
    planned = {
        line.split("=", 1)[1]
        for line in map(str.strip, out.splitlines())
        if line.startswith("wildcards: cell=")
    }
    runnable = {c.id for c in load_cells(SEED_CONFIG) if not c.blocked}
    assert runnable <= planned
    for engine in ("llamacpp-cuda", "vllm-nightly", "sglang"):
        assert f"engines/{engine}.json" in out


def test_sglang_drafter_cell_asks_for_per_request_spec_fields(plain_env, capsys):
    """The SGLang NEXTN cell's client sends `return_spec_tokens_details`, so the server returns
    per-request acceptance; the other cells' clients add nothing."""
    planned = plans(capsys)
    nextn = planned["gemma-4-12b__sglang__nvfp4-axionml__nextn__sharegpt-c32"]["client"]
    assert nextn[nextn.index("--extra-body") + 1] == '{"return_spec_tokens_details":true}'
    others = [p["client"] for c, p in planned.items() if "nextn" not in c and not p["blocked"]]
    assert others and not any("--extra-body" in client for client in others)
