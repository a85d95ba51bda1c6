"""Malformed configs beyond tests/config/test_matrix.py's 26 (which cover unknown engine kinds,
missing models, bad types, negative concurrency, a drafter the engine lacks, duplicate cell ids,
...): each is rejected before anything runs, naming the key path. Secrets written into a config are
refused too, and the refusal writes the secret nowhere."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.faults.pipeline import files_holding
from tests.support.config import default_config, setter
from tests.support.pipeline import run_snakemake, write_config
from workflow_scripts.config.matrix import (
    ConfigError,
    build_cells,
    load_config_file,
    validate_config,
)

REPO = Path(__file__).resolve().parents[2]

# A cell these tests append to the default matrix: the entry after its last one.
NEW_CELL = f"cells[{len(default_config()['cells'])}]"


ENGINE = ["engines", "llamacpp-cpu"]
WORKLOAD = ["workloads", "c4"]
EXPLICIT = {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "c4"}
SGLANG = {
    "kind": "sglang",
    "launch": "native",
    "binary": "python3 -m sglang.launch_server",
    "api_key_env": "BENCH_API_KEY",
}

MUTATIONS = [
    (
        "api_key_env not a variable name",
        setter(ENGINE + ["api_key_env"], "$BENCH KEY"),
        "engines.llamacpp-cpu.api_key_env",
    ),
    (
        "workload api_key_env not a variable name",
        setter(WORKLOAD + ["api_key_env"], "a-b"),
        "workloads.c4.api_key_env",
    ),
    (
        "api_key_env for an engine that takes keys only on argv",
        lambda c: c["engines"].update({"sg": SGLANG}),
        "engines.sg.api_key_env",
    ),
    (
        "a key in the engine's env",
        setter(ENGINE + ["env"], {"LLAMA_API_KEY": "sk-123"}),
        "engines.llamacpp-cpu.env.LLAMA_API_KEY",
    ),
    (
        "a hub token in the engine's env",
        setter(ENGINE + ["env"], {"HF_TOKEN": "hf_x"}),
        "engines.llamacpp-cpu.env.HF_TOKEN",
    ),
    (
        "a key on the command line",
        setter(ENGINE + ["extra_args"], ["-v", "--api-key", "k"]),
        "engines.llamacpp-cpu.extra_args[1]",
    ),
    ("fractional concurrency", setter(WORKLOAD + ["concurrency"], 2.5), "workloads.c4.concurrency"),
    ("boolean concurrency", setter(WORKLOAD + ["concurrency"], True), "workloads.c4.concurrency"),
    ("negative grace", setter(WORKLOAD + ["grace_s"], -1), "workloads.c4.grace_s"),
    ("zero request rate", setter(WORKLOAD + ["request_rate"], 0), "workloads.c4.request_rate"),
    (
        "dataset without kind",
        setter(WORKLOAD + ["dataset"], {"path": "p.jsonl"}),
        "workloads.c4.dataset",
    ),
    ("zero readiness timeout", setter(["ready_timeout_s"], 0), "ready_timeout_s"),
    ("host not a string", setter(["host"], 8080), "host"),
    ("unknown context guard", setter(["context_guard"], "truncate"), "context_guard"),
    ("zero sampling interval", setter(["memory"], {"interval_s": 0}), "memory.interval_s"),
    (
        "port out of range",
        setter(ENGINE + ["settings", "port"], 70000),
        "engines.llamacpp-cpu.settings.port",
    ),
    ("model without quants", lambda c: c["models"].update({"x": {"family": "X"}}), "models.x"),
    (
        "hub weights without revision",
        lambda c: c["models"].update(
            {"x": {"quants": {"q": {"weights": {"source": "hf", "repo": "o/r"}}}}}
        ),
        "models.x.quants.q.weights",
    ),
    (
        "drafter of an unknown model",
        lambda c: c["drafters"].update({"mtp": {"kind": "draft-mtp", "model": "nope"}}),
        "drafters.mtp.model",
    ),
    (
        "explicit cell with an unknown engine",
        lambda c: c["cells"].append({**EXPLICIT, "engine": "vllm-gpu"}),
        f"{NEW_CELL}.engine",
    ),
    (
        "explicit cell with an unknown workload",
        lambda c: c["cells"].append({**EXPLICIT, "workload": "c64"}),
        f"{NEW_CELL}.workload",
    ),
    (
        "explicit cell with an unknown drafter",
        lambda c: c["cells"].append({**EXPLICIT, "drafter": "eagle3"}),
        f"{NEW_CELL}.drafter",
    ),
    (
        "a cell both explicit and a matrix",
        lambda c: c["cells"][0].update({"model": "smollm2-135m"}),
        "cells[0]",
    ),
    ("cells not a list", setter(["cells"], {"model": "smollm2-135m"}), "cells"),
]


@pytest.mark.parametrize("description,mutate,key", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_malformed_config_is_rejected_naming_the_key(description, mutate, key):
    config = copy.deepcopy(default_config())
    mutate(config)
    with pytest.raises(ConfigError) as error:
        build_cells(validate_config(config))
    assert f"'{key}'" in str(error.value), str(error.value)


def test_a_config_that_is_not_yaml_is_named(tmp_path):
    path = tmp_path / "matrix.yaml"
    path.write_text("models: {gemma: [unclosed\n")
    with pytest.raises(ConfigError, match="matrix.yaml: not valid YAML"):
        load_config_file(path)


def test_a_secret_in_the_config_stops_snakemake_before_anything_and_is_written_nowhere(tmp_path):
    secret = "sk-config-secret-91f0c2"
    config = default_config()
    config["engines"]["llamacpp-cpu"]["env"] = {"LLAMA_API_KEY": secret}
    write_config(tmp_path, config)
    proc = run_snakemake(tmp_path, timeout=120)
    assert proc.returncode != 0
    assert "engines.llamacpp-cpu.env.LLAMA_API_KEY" in proc.stdout + proc.stderr
    assert secret not in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()
    assert files_holding(tmp_path, secret.encode()) == [str(tmp_path / "matrix.yaml")]


def test_a_search_rate_whose_probe_id_cannot_be_read_back_stops_plan_and_a_dry_run(tmp_path):
    """`search.min: 1e-05` used to be planned by `plan`, then ended `snakemake -n` in a traceback
    (probe id `...-r1e-05` is read back as nothing). Both now refuse it, naming the key."""
    config = default_config()
    goal = config["workloads"]["goal"]
    goal["concurrency"] = 4
    goal["search"] = {"over": "request_rate", "min": 1e-5, "max": 1.0, "tolerance": 0.1}
    path = write_config(tmp_path, config)
    plan = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.plan", "--configfile", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    dry = run_snakemake(tmp_path, "-n", timeout=120)
    for proc in (plan, dry):
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out
        assert "config key 'workloads.goal.search.min'" in out and "r1e-05" in out, out
        assert "Traceback" not in out, out
    assert not (tmp_path / "results").exists()


def test_a_cell_id_longer_than_a_file_name_allows_stops_plan_and_a_dry_run(tmp_path):
    """A workload name of 230 letters (not periodic: Snakemake refuses a wildcard that is): the
    cell id (and its log, `logs/cells/<id>.log`) could never be written; both `plan` and
    `snakemake -n` refuse it naming the entry, the id's length and the limit, before anything is
    written. Before, both planned it."""
    config = default_config()
    name = "w" * 229 + "z"
    config["workloads"][name] = copy.deepcopy(config["workloads"]["c4"])
    config["cells"].append({**EXPLICIT, "workload": name})
    path = write_config(tmp_path, config)
    plan = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.plan", "--configfile", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    dry = run_snakemake(tmp_path, "-n", timeout=120)
    size = len(f"smollm2-135m__llamacpp-cpu__q4_0__none__{name}")
    for proc in (plan, dry):
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out
        assert f"config key '{NEW_CELL}': cell id 'smollm2-135m__llamacpp-cpu__" in out, out
        assert f"is {size} bytes" in out and "an id may be at most 229 bytes" in out, out
        assert "Traceback" not in out, out
    assert not (tmp_path / "results").exists()
