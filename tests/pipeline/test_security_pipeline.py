"""No secret lands in a file: the REAL pipeline, end to end, with `HF_TOKEN` and an API key in its
environment, both in use, then every file it wrote scanned byte by byte (binary ones too).

The weights come through `huggingface_hub` from a STAND-IN hub (`fixtures/weights/hub_standin.py`
on 127.0.0.1, the real hub being out of reach) that serves the real SmolLM2 GGUF and refuses any
request without the token. The engine is the real llama-server, started with the API key from
`engines.<name>.api_key_env`; one cell's client sends the key, another's is told to send none and
is refused.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.fixtures.faults.pipeline import files_holding
from tests.fixtures.weights.hub_standin import FakeRepo, Faults, HubStandIn
from tests.support.engines import smollm2_gguf
from tests.support.pipeline import run_snakemake, tiny_config, tiny_workload, write_config

pytestmark = [pytest.mark.slow, pytest.mark.standin]

HF_TOKEN = "hf_pipelineScanToken7c1e9a0b2d4f"
API_KEY = "sk-pipeline-scan-3f8a1d6e9b2c"
REPO = "acme/smollm2-gguf"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
KEYED = "smollm2-hub__llamacpp-keyed__q4_1__none__tiny"
UNKEYED = "smollm2-hub__llamacpp-keyed__q4_1__none__nokey"


@pytest.fixture(scope="module")
def secret_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("secrets")
    gguf = Path(smollm2_gguf(workdir)).read_bytes()
    sha = hashlib.sha1(b"smollm2 stand-in commit").hexdigest()
    repo = FakeRepo(REPO, {sha: {FILENAME: gguf, "README.md": b"# SmolLM2\n"}}, {"main": sha})
    config = tiny_config(
        [
            {"model": "smollm2-hub", "engine": "llamacpp-keyed", "workload": "tiny"},
            {"model": "smollm2-hub", "engine": "llamacpp-keyed", "workload": "nokey"},
        ],
        workloads={"tiny": tiny_workload(), "nokey": tiny_workload(api_key_env="BENCH_NO_KEY_SET")},
        models={
            "smollm2-hub": {
                "quants": {
                    "q4_1": {
                        "weights": {
                            "source": "hf",
                            "repo": REPO,
                            "revision": "main",
                            "filename": FILENAME,
                        }
                    }
                }
            }
        },
    )
    config["engines"]["llamacpp-keyed"] = {
        **config["engines"].pop("llamacpp-cpu"),
        "api_key_env": "BENCH_API_KEY",
    }
    write_config(workdir, config)
    with (
        pytest.MonkeyPatch.context() as env,
        HubStandIn(repo, Faults(required_token=HF_TOKEN)) as hub,
    ):
        env.setenv("HF_TOKEN", HF_TOKEN)
        env.setenv("BENCH_API_KEY", API_KEY)
        env.delenv("BENCH_NO_KEY_SET", raising=False)
        env.setenv("HF_ENDPOINT", hub.endpoint)
        env.setenv("HF_HOME", str(workdir / "hf-home"))
        env.delenv("HF_HUB_CACHE", raising=False)
        env.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
        proc = run_snakemake(workdir)
        seen_auth = {s.authorization for s in hub.seen if REPO in s.path}
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return workdir, proc, seen_auth


def metrics(workdir: Path, cell_id: str) -> dict:
    return json.loads((workdir / "results/cells" / cell_id / "metrics.json").read_text())


def test_both_secrets_were_in_use(secret_run):
    workdir, _, seen_auth = secret_run
    assert seen_auth == {f"Bearer {HF_TOKEN}"}  # every request for the repo carried it
    keyed = metrics(workdir, KEYED)
    assert keyed["status"] == "done", keyed.get("reason")
    assert keyed["load"]["api_key_set"] is True and keyed["completed"] == 4
    client = keyed["client_command"]  # how to rerun the load by hand: the variable's name
    assert client[client.index("--api-key-env") + 1] == "BENCH_API_KEY"
    assert keyed["weights"]["source"] == "hf"
    refused = metrics(workdir, UNKEYED)  # same server settings, a client that sends no key
    assert refused["status"] == "failed"
    assert "no request completed ({'http_401': 4})" in refused["reason"]


@pytest.mark.parametrize("secret", [HF_TOKEN, API_KEY], ids=["HF_TOKEN", "api-key"])
def test_no_secret_in_any_file_the_pipeline_wrote(secret_run, secret):
    """results/, logs/, .snakemake/ (metadata, logs, scripts), the hub cache: every file."""
    workdir, proc, _ = secret_run
    for folder in ("results", "logs", ".snakemake"):
        assert (workdir / folder).is_dir()
    assert len([p for p in workdir.rglob("*") if p.is_file()]) > 50
    assert files_holding(workdir, secret.encode()) == []
    assert secret not in proc.stdout + proc.stderr
    planted = workdir / ".snakemake" / "planted.bin"  # the scan itself finds what is there
    planted.write_bytes(b"\x00\xff" + secret.encode() + b"\x00")
    assert files_holding(workdir, secret.encode()) == [str(planted)]
    planted.unlink()
