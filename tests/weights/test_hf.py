"""The `hf` weights source through `huggingface_hub`, against a stand-in for the hub; and the GB10
matrix's weights step with its real repo ids and file names.

Stand-in: the real hub is out of reach here, so `fixtures/weights/hub_standin.py` serves the hub's
file API for small fake repos on 127.0.0.1 (model info, tree, resolve with Range; repo ids match
whatever their case, file names only as cased, as on the hub). Everything on our side is real:
`huggingface_hub` downloads into its own cache layout, we verify and write the manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.weights.hub_standin import (
    BIG_FILE_BYTES,
    SHA_MAIN,
    SHA_V1,
    TINY_REPO,
    HubStandIn,
    gb10_repos,
    tiny_repo,
)
from workflow_scripts.config.matrix import load_cells
from workflow_scripts.weights.fetch import WeightsError, fetch_weights

pytestmark = pytest.mark.standin

TOKEN = "hf_standinSecretToken0123456789"
REPO = TINY_REPO
ROOT = Path(__file__).resolve().parents[2]
SHA1 = re.compile(r"^[0-9a-f]{40}$")


@pytest.fixture
def hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path / "llmbench"))
    with HubStandIn(tiny_repo()) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        yield server


def spec(**overrides) -> dict:
    return {
        "source": "hf",
        "repo": REPO,
        "revision": "v1.0",
        "patterns": ["*Q4_K_M.gguf", "*.json"],
        "filename": "tiny-Q4_K_M.gguf",
        **overrides,
    }


def test_pinned_revision_resolved_and_only_matching_files_fetched(hub, tmp_path):
    manifest = fetch_weights(spec(), tmp_path / "m.json")
    assert manifest == json.loads((tmp_path / "m.json").read_text())
    assert manifest["revision"] == "v1.0"
    assert manifest["revision_sha"] == manifest["resolved_revision"] == SHA_V1
    assert manifest["repo"] == REPO
    files = hub.repo.commits[SHA_V1]
    assert {f["name"] for f in manifest["files"]} == {"config.json", "tiny-Q4_K_M.gguf"}
    for f in manifest["files"]:
        assert f["sha256"] == hashlib.sha256(files[f["name"]]).hexdigest()
        assert f["size"] == len(files[f["name"]])
    assert manifest["total_bytes"] == sum(f["size"] for f in manifest["files"])
    assert manifest["fetched_at"].endswith("Z")
    primary = Path(manifest["primary"])
    assert primary.read_bytes() == files["tiny-Q4_K_M.gguf"]
    hub_cache = tmp_path / "hf-home" / "hub"  # huggingface_hub's own layout, under HF_HOME
    assert primary == hub_cache / "models--acme--tiny-gguf" / "snapshots" / SHA_V1 / primary.name
    assert manifest["hub_cache"] == str(hub_cache)
    fetched = {s.path.rsplit("/", 1)[-1] for s in hub.downloads()}
    assert fetched == {"config.json", "tiny-Q4_K_M.gguf"}

    # The branch resolves to its own commit and file; the tag's files are not fetched again.
    hub.seen.clear()
    on_main = fetch_weights(spec(revision="main"), tmp_path / "main.json")
    assert on_main["revision_sha"] == SHA_MAIN
    by_name = {f["name"]: f["sha256"] for f in on_main["files"]}
    assert by_name["tiny-Q4_K_M.gguf"] != manifest["files"][1]["sha256"]
    assert {s.path.rsplit("/", 1)[-1] for s in hub.downloads()} == {"tiny-Q4_K_M.gguf"}

    hub.seen.clear()
    again = fetch_weights(spec(), tmp_path / "again.json")
    assert again["files"] == manifest["files"]
    assert hub.downloads() == []  # cached: downloaded once


def test_filename_alone_fetches_that_file_only(hub, tmp_path):
    manifest = fetch_weights(
        {k: v for k, v in spec(filename="tiny-Q8_0.gguf").items() if k != "patterns"},
        tmp_path / "m.json",
    )
    assert [f["name"] for f in manifest["files"]] == ["tiny-Q8_0.gguf"]
    assert [s.path.rsplit("/", 1)[-1] for s in hub.downloads()] == ["tiny-Q8_0.gguf"]


def test_patterns_without_filename_pick_the_one_gguf(hub, tmp_path):
    manifest = fetch_weights(
        {k: v for k, v in spec(patterns=["*Q8_0.gguf"]).items() if k != "filename"},
        tmp_path / "m.json",
    )
    assert Path(manifest["primary"]).name == "tiny-Q8_0.gguf"
    everything = fetch_weights(
        {k: v for k, v in spec().items() if k not in ("filename", "patterns")},
        tmp_path / "all.json",
    )
    assert len(everything["files"]) == 4
    assert everything["primary"] == everything["snapshot_dir"]  # what vLLM would load


def test_interrupted_download_resumes(hub, tmp_path):
    hub.faults.drop_once.add("tiny-Q4_K_M.gguf")
    manifest = fetch_weights(spec(), tmp_path / "m.json")
    gets = [s for s in hub.downloads() if s.path.endswith("tiny-Q4_K_M.gguf")]
    assert len(gets) == 2, gets
    assert gets[0].range is None
    resumed_at = int(gets[1].range.removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at < BIG_FILE_BYTES  # a Range request picked up where the data stopped
    expected = hashlib.sha256(hub.repo.commits[SHA_V1]["tiny-Q4_K_M.gguf"]).hexdigest()
    assert {f["name"]: f["sha256"] for f in manifest["files"]}["tiny-Q4_K_M.gguf"] == expected


def test_wrong_checksum_rejected_and_retried_next_run(hub, tmp_path):
    hub.faults.corrupt.add("tiny-Q4_K_M.gguf")
    with pytest.raises(WeightsError, match=r"tiny-Q4_K_M\.gguf.*does not verify: sha256"):
        fetch_weights(spec(), tmp_path / "m.json")
    assert not (tmp_path / "m.json").exists()
    blobs = tmp_path / "hf-home" / "hub" / "models--acme--tiny-gguf" / "blobs"
    expected = hashlib.sha256(hub.repo.commits[SHA_V1]["tiny-Q4_K_M.gguf"]).hexdigest()
    assert not (blobs / expected).exists()  # the bad copy is gone, so the next run refetches
    hub.faults.corrupt.clear()
    manifest = fetch_weights(spec(), tmp_path / "m.json")
    assert expected in {f["sha256"] for f in manifest["files"]}


def test_pinned_sha256_of_filename_is_checked(hub, tmp_path):
    with pytest.raises(WeightsError, match="the config pins " + "0" * 64):
        fetch_weights(spec(sha256="0" * 64), tmp_path / "m.json")


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"revision": "v9.9"}, "revision 'v9.9' not found in repo 'acme/tiny-gguf'"),
        ({"filename": "tiny-Q2_K.gguf"}, "file 'tiny-Q2_K.gguf' not found"),
        ({"filename": "tiny-Q8_0.gguf"}, "file 'tiny-Q8_0.gguf' is not matched by the patterns"),
        ({"patterns": ["*IQ1_S.gguf"]}, r"no file of 'acme/tiny-gguf@v1.0' matches \['\*IQ1_S"),
        ({"repo": "acme/nope"}, "repo 'acme/nope' not found"),
    ],
)
def test_missing_things_are_named(hub, tmp_path, overrides, named):
    with pytest.raises(WeightsError, match=named):
        fetch_weights(spec(**overrides), tmp_path / "m.json")
    assert hub.downloads() == []


def test_disk_check_fails_before_downloading(hub, tmp_path):
    hub.faults.advertised_size["tiny-Q4_K_M.gguf"] = 2**60
    with pytest.raises(WeightsError, match=r"not enough disk space for acme/tiny-gguf: .*GiB free"):
        fetch_weights(spec(), tmp_path / "m.json")
    assert hub.downloads() == []


def test_token_from_environment_only_and_never_written(hub, tmp_path, monkeypatch):
    hub.faults.required_token = TOKEN
    with pytest.raises(WeightsError, match="set HF_TOKEN"):
        fetch_weights(spec(), tmp_path / "m.json")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    manifest = fetch_weights(spec(), tmp_path / "m.json")
    assert manifest["revision_sha"] == SHA_V1
    assert {s.authorization for s in hub.seen if s.authorization} == {f"Bearer {TOKEN}"}
    # A failing fetch's message is written too (the failed stamp): make one and scan it all.
    with pytest.raises(WeightsError) as failure:
        fetch_weights(spec(revision="v9.9"), tmp_path / "bad.json")
    (tmp_path / "failure.txt").write_text(str(failure.value))
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) > 5
    for path in written:
        assert TOKEN.encode() not in path.read_bytes(), path


# -- the GB10 matrix's weights step, against the stand-in with the real file names --------------
GB10 = ROOT / "configs" / "gb10-gemma4.yaml"


def gb10_weights() -> dict[str, dict]:
    """What the Snakefile fetches for the GB10 config: every non-blocked cell's weights and draft
    weights (rules/common.smk `WEIGHTS`)."""
    out = {}
    for cell in load_cells(GB10):
        if not cell.blocked:
            out[cell.weights_key] = cell.weights
            if cell.drafter_weights:
                out[cell.drafter_weights_key] = cell.drafter_weights
    return out


@pytest.fixture
def gb10_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with HubStandIn(gb10_repos()) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        yield server


def test_gb10_weights_step_fetches_every_runnable_cells_files(gb10_hub, tmp_path):
    """The real weights rule (Snakemake, the config's weights targets) against the stand-in hub:
    every non-blocked cell's files arrive, each GGUF entry fetching exactly its one file."""
    specs = gb10_weights()
    assert len(specs) == 8  # 4 GGUFs, the MTP GGUF, 2 NVFP4 checkpoints, the assistant model
    targets = [f"results/weights/{key}.json" for key in specs]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(ROOT / "Snakefile"),
            "-d",
            str(tmp_path),
            "--configfile",
            str(GB10),
            "--cores",
            "2",
            *targets,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_repo: dict[str, set[str]] = {}
    for seen in gb10_hub.downloads():
        repo, _, rest = seen.path.lstrip("/").partition("/resolve/")
        by_repo.setdefault(repo, set()).add(rest.split("/", 1)[1])
    for key, spec in specs.items():
        manifest = json.loads((tmp_path / "results" / "weights" / f"{key}.json").read_text())
        assert manifest.get("status") != "failed", (key, manifest.get("reason"))
        assert manifest["repo"] == spec["repo"] and SHA1.match(manifest["revision_sha"])
        names = {f["name"] for f in manifest["files"]}
        if spec.get("filename"):
            assert names == {spec["filename"]}, key
            assert Path(manifest["primary"]).read_bytes()[:4] == b"GGUF"
            assert manifest["primary"].endswith("/" + spec["filename"])
        else:
            assert names == {"config.json", "model.safetensors", "tokenizer.json"}, key
            assert manifest["primary"] == manifest["snapshot_dir"]
    assert by_repo == {
        "ggml-org/gemma-4-12B-it-GGUF": {"gemma-4-12B-it-Q4_K_M.gguf", "gemma-4-12B-it-Q8_0.gguf"},
        "unsloth/gemma-4-12b-it-GGUF": {
            "gemma-4-12b-it-Q4_K_M.gguf",
            "gemma-4-12b-it-Q6_K.gguf",
            "MTP/gemma-4-12b-it-Q8_0-MTP.gguf",
        },
        **{
            repo: {"config.json", "model.safetensors", "tokenizer.json"}
            for repo in (
                "RedHatAI/gemma-4-12B-it-NVFP4",
                "AxionML/Gemma-4-12B-NVFP4",
                "google/gemma-4-12B-it-assistant",
            )
        },
    }


@pytest.mark.parametrize(
    ("repo", "filename", "named"),
    [
        # the names this config had before: the id resolves whatever its case, the file does not
        (
            "ggml-org/gemma-4-12b-it-GGUF",
            "gemma-4-12b-it-Q4_K_M.gguf",
            "matches ['gemma-4-12b-it-Q4_K_M.gguf'] (files: README.md, gemma-4-12B-it-Q4_0.gguf",
        ),
        (
            "ggml-org/gemma-4-12b-it-GGUF",
            "gemma-4-12b-it-Q6_K.gguf",
            "no file of 'ggml-org/gemma-4-12b-it-GGUF@main' matches ['gemma-4-12b-it-Q6_K.gguf']",
        ),
        ("AxionML/gemma-4-12B-it-NVFP4", None, "repo 'AxionML/gemma-4-12B-it-NVFP4' not found"),
    ],
)
def test_gb10_names_cased_otherwise_are_not_found(gb10_hub, tmp_path, repo, filename, named):
    spec = {"source": "hf", "repo": repo, "revision": "main"}
    if filename:
        spec["filename"] = filename
    with pytest.raises(WeightsError, match=re.escape(named)):
        fetch_weights(spec, tmp_path / "m.json")
    assert gb10_hub.downloads() == []
