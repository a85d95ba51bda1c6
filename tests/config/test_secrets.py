"""Secrets a config could put on a server's command line (issue #25, item 2): a settings key
becomes a flag, extra_args and docker options are argv, env values reach `docker run -e`. Each
secret-looking name or value is refused naming its key path and saying how to pass it instead, and
the refusal repeats no secret. Behind that, `redact` blanks what a recorded command would leak."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import yaml

from tests.support.config import REPO, default_config, setter
from tests.support.pipeline import run_snakemake, write_config
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.config.plan import main as plan_main
from workflow_scripts.redact import REDACTED, redact
from workflow_scripts.vocabulary import ConfigError

KEY = "sk-plantedSecret7Qx2Lm9Vb4Np"
HF = "hf_PlantedHubTokenAbCdEfGhIjKlMnOpQrSt"
LLAMA = ["engines", "llamacpp-cpu"]
VLLM = ["engines", "vllm-cpu"]
DOCKER = {"kind": "vllm", "launch": "docker", "docker": {"image": "vllm/vllm-openai:v0.11.0"}}
EXPLICIT = {"model": "smollm2-135m", "quant": "q4_0", "engine": "llamacpp-cpu", "workload": "c4"}

# A cell these tests append to the default matrix: the entry after its last one.
NEW_CELL = f"cells[{len(default_config()['cells'])}]"


def docker_engine(**docker):
    return lambda c: c["engines"].update(
        {"vllm-docker": {**DOCKER, "docker": {**DOCKER["docker"], **docker}}}
    )


SECRETS = [
    (
        "api key as a setting",
        setter(LLAMA + ["settings", "api_key"], KEY),
        "llamacpp-cpu.settings.api_key",
    ),
    (
        "hub token as a setting",
        setter(VLLM + ["settings", "hf_token"], HF),
        "vllm-cpu.settings.hf_token",
    ),
    (
        "password as a setting",
        setter(VLLM + ["settings", "ssl_keyfile_password"], "p"),
        "settings.ssl_keyfile_password",
    ),
    (
        "a secret key inside a JSON setting",
        setter(VLLM + ["settings", "hf_overrides"], {"auth": {"token": "x"}}),
        "engines.vllm-cpu.settings.hf_overrides.auth.token",
    ),
    (
        "hub token flag, then its value",
        setter(VLLM + ["extra_args"], ["--hf-token", HF]),
        "vllm-cpu.extra_args[0]",
    ),
    (
        "hub token flag=value",
        setter(VLLM + ["extra_args"], [f"--hf-token={HF}"]),
        "vllm-cpu.extra_args[0]",
    ),
    (
        "api key flag=value",
        setter(LLAMA + ["extra_args"], [f"--api-key={KEY}"]),
        "llamacpp-cpu.extra_args[0]",
    ),
    (
        "an Authorization header",
        setter(LLAMA + ["extra_args"], ["--header", "Authorization: Bearer abc123def456"]),
        "engines.llamacpp-cpu.extra_args[1]",
    ),
    (
        "an API key header",
        setter(LLAMA + ["extra_args"], ["-H", "X-Api-Key: abc"]),
        "llamacpp-cpu.extra_args[1]",
    ),
    (
        "a bearer value",
        setter(LLAMA + ["extra_args"], ["--x", "Bearer abc123def456"]),
        "llamacpp-cpu.extra_args[1]",
    ),
    (
        "a key-looking value under any flag",
        setter(LLAMA + ["extra_args"], ["--alias", KEY]),
        "extra_args[1]",
    ),
    (
        "a token-looking setting value",
        setter(VLLM + ["settings", "served_model_name"], HF),
        "vllm-cpu.settings.served_model_name",
    ),
    (
        "a key-looking env value",
        setter(VLLM + ["env"], {"EXTRA": KEY}),
        "engines.vllm-cpu.env.EXTRA",
    ),
    (
        "a credentials variable",
        setter(VLLM + ["env"], {"AWS_CREDENTIALS": "x"}),
        "engines.vllm-cpu.env.AWS_CREDENTIALS",
    ),
    (
        "docker -e NAME=value",
        docker_engine(extra_args=["-e", f"HF_TOKEN={HF}"]),
        "engines.vllm-docker.docker.extra_args[1]",
    ),
    (
        "docker --env=NAME=value",
        docker_engine(extra_args=["--env=HF_TOKEN=x"]),
        "engines.vllm-docker.docker.extra_args[0]",
    ),
    (
        "docker --env NAME=value",
        docker_engine(options=["--env", "API_KEY=x"]),
        "engines.vllm-docker.docker.options[1]",
    ),
    (
        "a key in the docker command",
        docker_engine(command=["serve", "--api-key", "k"]),
        "engines.vllm-docker.docker.command[1]",
    ),
    (
        "a key in the native binary",
        lambda c: c["engines"]["llamacpp-cpu"].update(
            {"launch": "native", "binary": "llama-server --api-key k"}
        ),
        "engines.llamacpp-cpu.binary",
    ),
    (
        "a cell's settings",
        lambda c: c["cells"].append({**EXPLICIT, "settings": {"api_key": KEY}}),
        f"{NEW_CELL}.settings.api_key",
    ),
    (
        "a drafter's settings",
        setter(["drafters", "ngram", "settings", "token"], "x"),
        "drafters.ngram.settings.token",
    ),
    (
        "a drafter's settings for one engine kind",
        setter(["drafters", "ngram", "for_engine_kind", "vllm", "settings", "hf_token"], "x"),
        "drafters.ngram.for_engine_kind.vllm.settings.hf_token",
    ),
    (
        "a key as a workload's name",
        lambda c: c["workloads"].update({KEY: c["workloads"]["c4"]}),
        f"'workloads (name #{len(default_config()['workloads']) + 1})'",
    ),
    (
        "a hub token as a quant's name",
        lambda c: c["models"]["gemma3-270m"]["quants"].update({HF: {"weights": {}}}),
        "'models.gemma3-270m.quants (name #2)'",
    ),
    (
        "a hub token in a dataset's path",
        setter(["workloads", "c4", "dataset", "path"], f"/data/{HF}/sharegpt.json"),
        "'workloads.c4.dataset.path'",
    ),
    (
        "a key in a trace's path",
        setter(
            ["workloads", "c4", "dataset"],
            {"kind": "trace", "format": "mooncake", "path": f"traces/{KEY}.jsonl"},
        ),
        "'workloads.c4.dataset.path'",
    ),
]


@pytest.mark.parametrize("description,mutate,key", SECRETS, ids=[s[0] for s in SECRETS])
def test_a_secret_wherever_a_config_can_put_it_is_refused_naming_the_key(description, mutate, key):
    config = copy.deepcopy(default_config())
    mutate(config)
    with pytest.raises(ConfigError) as error:
        build_cells(validate_config(config))
    message = str(error.value)
    assert key in message, message
    assert "api_key_env" in message and "HF_TOKEN" in message, message  # how to pass it instead
    assert KEY not in message and HF not in message


@pytest.mark.parametrize(
    "harmless",
    [
        {"settings": {"max_num_batched_tokens": 512, "tokenizer_mode": "auto"}},
        {"settings": {"long_prefill_token_threshold": 64, "return_tokens_as_token_ids": True}},
        {"extra_args": ["--max-num-batched-tokens", "512", "--tokenizer", "HuggingFaceTB/x"]},
        {"env": {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}},
    ],
    ids=["token-count settings", "token words mid-name", "tokenizer flags", "tokenizer env"],
)
def test_flags_that_only_mention_tokens_are_not_secrets(harmless):
    config = default_config()
    for key, value in harmless.items():
        config["engines"]["vllm-cpu"][key] = value
    build_cells(validate_config(config))


def test_docker_passes_a_variable_by_name_only():
    """`-e HF_TOKEN` (no value) has docker copy it from its own environment: allowed."""
    config = default_config()
    docker_engine(extra_args=["-e", "HF_TOKEN", "--env", "VLLM_API_KEY"])(config)
    build_cells(validate_config(config))


def test_a_secret_in_settings_stops_plan_and_snakemake_and_is_printed_nowhere(tmp_path):
    config = default_config()
    config["engines"]["vllm-cpu"]["settings"]["api_key"] = KEY
    path = write_config(tmp_path, config)
    plan = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.plan", "--configfile", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert plan.returncode == 2
    assert "engines.vllm-cpu.settings.api_key" in plan.stderr
    assert KEY not in plan.stdout + plan.stderr
    proc = run_snakemake(tmp_path, "-n", timeout=120)
    assert proc.returncode != 0
    assert "engines.vllm-cpu.settings.api_key" in proc.stdout + proc.stderr
    assert KEY not in proc.stdout + proc.stderr


# -- the second line: what a recorded command shows -------------------------------------------


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--api-key", KEY, "--port", "8"], ["--api-key", REDACTED, "--port", "8"]),
        ([f"--hf-token={HF}"], [f"--hf-token={REDACTED}"]),
        (
            ["-e", f"HF_TOKEN={HF}", "-e", "HF_TOKEN"],
            ["-e", f"HF_TOKEN={REDACTED}", "-e", "HF_TOKEN"],
        ),
        (["LLAMA_API_KEY=k", "llama-server"], [f"LLAMA_API_KEY={REDACTED}", "llama-server"]),
        (
            ["--header", "Authorization: Bearer abc123def456"],
            ["--header", f"Authorization: Bearer {REDACTED}"],
        ),
        (["--alias", KEY], ["--alias", REDACTED]),
        (["-H", "X-Api-Key: abc"], ["-H", f"X-Api-Key: {REDACTED}"]),
        (['{"model":"m","token":"' + HF + '"}'], ['{"model":"m","token":"' + REDACTED + '"}']),
        (["--password", "--port", "8"], ["--password", "--port", "8"]),  # a switch: nothing to hide
        (["--max-tokens", "64", "--tokenizer", "t"], ["--max-tokens", "64", "--tokenizer", "t"]),
    ],
    ids=[
        "flag value",
        "flag=value",
        "docker -e",
        "env prefix",
        "bearer header",
        "token-looking",
        "api key header",
        "inside JSON",
        "switch",
        "harmless",
    ],
)
def test_redact_blanks_secret_values_and_nothing_else(argv, expected):
    assert redact(argv) == expected


def test_a_secret_that_got_past_validation_appears_in_none_of_plans_output(
    tmp_path, monkeypatch, capsys
):
    """With the config check switched off, plan's text and JSON still show no secret."""
    import workflow_scripts.config.secrets as secrets

    monkeypatch.setattr(secrets, "check_no_secrets", lambda config: None)
    config = default_config()
    config["engines"]["vllm-cpu"]["settings"]["api_key"] = KEY
    config["engines"]["llamacpp-cpu"]["extra_args"] = [f"--hf-token={HF}", "--alias", KEY]
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(config))
    for extra in ([], ["--json"]):
        assert plan_main(["--configfile", str(path), *extra]) == 0
        out = capsys.readouterr()
        assert KEY not in out.out + out.err and HF not in out.out + out.err
        assert REDACTED in out.out
        if extra:
            assert all(json.loads(line) for line in out.out.splitlines())


def test_redact_is_a_leaf():
    """Whatever records a command can import it: it imports nothing of the package."""
    from tests.support.import_graph import import_graph

    assert import_graph()["workflow_scripts.redact"] == set()
