"""Server argv for every engine x drafter kind, launch forms (build, native, docker), config
errors that name the key, and the engines' spec-decode readouts.

The vLLM and SGLang metric texts below are STAND-INS written in the engines' documented formats
(neither engine can run here); llama.cpp is exercised for real in the lifecycle tests."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.engines import make_config, one_cell
from workflow_scripts.engines import adapter_for
from workflow_scripts.engines.base import flag_args
from workflow_scripts.engines.command import cell_server_command, cell_weights
from workflow_scripts.vocabulary import ConfigError

SHA_MAIN = "a" * 40
SHA_DRAFT = "b" * 40


def llamacpp_engine(**extra) -> dict:
    return {"kind": "llamacpp", "launch": "native", "binary": "/opt/llama-server", **extra}


def vllm_engine(**extra) -> dict:
    return {"kind": "vllm", "launch": "native", "binary": "vllm serve", **extra}


def sglang_engine(**extra) -> dict:
    return {
        "kind": "sglang",
        "launch": "native",
        "binary": "python3 -m sglang.launch_server",
        **extra,
    }


def build(
    engine: dict,
    drafter: dict | None = None,
    quant: str = "q",
    draft_quant: str = "q",
    manifests: tuple = (None, None),
    port: int = 9000,
    cell_extra: dict | None = None,
    **top,
):
    drafters = {}
    cell = {"model": "m", "quant": quant, "engine": "e", "workload": "w", **(cell_extra or {})}
    if drafter is not None:
        spec = dict(drafter)
        if spec.pop("with_model", False):
            spec.update(model="draft", quant=draft_quant)
        drafters["d"] = spec
        cell["drafter"] = "d"
    cell_obj = one_cell(make_config({"e": engine}, [cell], drafters=drafters, **top))
    adapter = adapter_for(engine["kind"])
    weights, draft = cell_weights(cell_obj, *manifests)
    return cell_obj, cell_server_command(cell_obj, adapter, {}, weights, draft, port)


def after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# -- llama.cpp ---------------------------------------------------------------------------------
LLAMACPP_DRAFTERS = [
    ("ngram-simple", "--spec-ngram-simple-size-m", False),
    ("ngram-map-k", "--spec-ngram-map-k-size-m", False),
    ("ngram-map-k4v", "--spec-ngram-map-k4v-size-m", False),
    ("ngram-mod", "--spec-ngram-mod-n-max", False),
    ("ngram-cache", None, False),
    ("draft-simple", "--spec-draft-n-max", True),
    ("draft-mtp", "--spec-draft-n-max", True),
    ("draft-eagle3", "--spec-draft-n-max", True),
]


def test_llamacpp_base_argv_and_defaults():
    _, command = build(llamacpp_engine(settings={"ctx_size": 4096, "threads": 2}))
    assert command.argv == [
        "/opt/llama-server",
        "-m",
        "/models/m.gguf",
        "-c",
        "4096",
        "--parallel",
        "2",
        "-cb",
        "-t",
        "2",
        "--metrics",
        "--host",
        "127.0.0.1",
        "--port",
        "9000",
    ]
    assert command.base_url == "http://127.0.0.1:9000"
    assert command.served_model is None and command.stop_argv is None


@pytest.mark.parametrize("kind,n_max_flag,needs_model", LLAMACPP_DRAFTERS)
def test_llamacpp_every_drafter_kind(kind, n_max_flag, needs_model):
    drafter = {"kind": kind, "n_max": 5, "with_model": needs_model}
    _, command = build(llamacpp_engine(), drafter)
    argv = command.argv
    assert after(argv, "--spec-type") == kind
    if needs_model:
        assert after(argv, "--model-draft") == "/models/draft.gguf"
        assert argv.index("--model-draft") < argv.index("--spec-type")
    else:
        assert "--model-draft" not in argv
    if n_max_flag:
        assert after(argv, n_max_flag) == "5"
    # the drafter sits after the capacity flags and before --metrics / --host
    assert argv.index("-cb") < argv.index("--spec-type") < argv.index("--metrics")


def test_llamacpp_drafter_settings_and_unknown_engine_settings_pass_through():
    engine = llamacpp_engine(
        settings={
            "flash_attn": True,
            "no_mmap": True,
            "cont_batching": False,
            "metrics": False,
            "cache_type_k": "q8_0",
        }
    )
    drafter = {"kind": "ngram-mod", "settings": {"spec_ngram_mod_n_min": 2}}
    _, command = build(engine, drafter)
    argv = command.argv
    assert after(argv, "-fa") == "on"
    assert "-nocb" in argv and "--metrics" not in argv
    assert after(argv, "--cache-type-k") == "q8_0" and "--no-mmap" in argv
    assert after(argv, "--spec-ngram-mod-n-min") == "2"


def test_llamacpp_model_drafter_needs_weights_unless_blocked():
    with pytest.raises(ConfigError, match=r"cells\[0\]\.drafter.*needs a draft model"):
        build(llamacpp_engine(), {"kind": "draft-mtp"})
    cell, _ = build(llamacpp_engine(), {"kind": "draft-mtp"}, cell_extra={"blocked": "no head"})
    assert cell.blocked == "no head"


def test_llamacpp_per_slot_context_from_config():
    cell, _ = build(llamacpp_engine(settings={"ctx_size": 65536}), workload={"concurrency": 32})
    assert adapter_for("llamacpp").per_slot_context(cell) == 2048


# -- vLLM --------------------------------------------------------------------------------------
VLLM_DRAFTERS = [
    ("mtp", False),
    ("mtp", True),
    ("eagle", True),
    ("eagle3", True),
    ("ngram", False),
    ("draft_model", True),
    ("suffix", False),
    ("medusa", True),
]


def test_vllm_base_argv_from_hub_id():
    engine = vllm_engine(
        settings={
            "max_num_seqs": 32,
            "gpu_memory_utilization": 0.85,
            "max_model_len": 65536,
            "enforce_eager": True,
        }
    )
    _, command = build(engine, quant="hub")
    assert command.argv == [
        "vllm",
        "serve",
        "org/model-hub",
        "--host",
        "127.0.0.1",
        "--port",
        "9000",
        "--max-model-len",
        "65536",
        "--gpu-memory-utilization",
        "0.85",
        "--max-num-seqs",
        "32",
        "--enforce-eager",
    ]
    assert command.served_model == "org/model-hub"
    assert (
        adapter_for("vllm").per_slot_context(
            one_cell(
                make_config(
                    {"e": engine}, [{"model": "m", "quant": "hub", "engine": "e", "workload": "w"}]
                )
            )
        )
        is None
    )


@pytest.mark.parametrize("kind,with_model", VLLM_DRAFTERS)
def test_vllm_every_drafter_kind(kind, with_model):
    drafter = {
        "kind": kind,
        "n_max": 4,
        "with_model": with_model,
        "settings": {"prompt_lookup_max": 5} if kind == "ngram" else {},
    }
    _, command = build(vllm_engine(), drafter, quant="hub", draft_quant="hub")
    config = json.loads(after(command.argv, "--speculative-config"))
    assert config["method"] == kind
    assert config["num_speculative_tokens"] == 4
    assert list(config)[:1] == ["method"]
    if with_model:
        assert config["model"] == "org/draft-hub"
    else:
        assert "model" not in config
    if kind == "ngram":
        assert config["prompt_lookup_max"] == 5


def test_vllm_pins_resolved_revisions_and_keeps_branch_names_out():
    manifests = (
        {"primary": "/hub/snap", "revision_sha": SHA_MAIN, "hub_cache": "/hub"},
        {"primary": "/hub/draft", "revision_sha": SHA_DRAFT, "hub_cache": "/hub"},
    )
    drafter = {"kind": "mtp", "n_max": 3, "with_model": True}
    _, command = build(vllm_engine(), drafter, quant="hub", draft_quant="hub", manifests=manifests)
    assert after(command.argv, "--revision") == SHA_MAIN
    config = json.loads(after(command.argv, "--speculative-config"))
    assert config == {
        "method": "mtp",
        "model": "org/draft-hub",
        "revision": SHA_DRAFT,
        "num_speculative_tokens": 3,
    }
    _, unpinned = build(vllm_engine(), drafter, quant="hub", draft_quant="hub")
    assert "--revision" not in unpinned.argv  # `main` is vLLM's default; not passed


def test_vllm_local_weights_use_the_path():
    _, command = build(vllm_engine())
    assert command.argv[2] == "/models/m.gguf"


def test_vllm_served_model_name_setting():
    _, command = build(vllm_engine(settings={"served_model_name": "gemma"}), quant="hub")
    assert command.served_model == "gemma"
    assert after(command.argv, "--served-model-name") == "gemma"


# -- SGLang ------------------------------------------------------------------------------------
SGLANG_DRAFTERS = [
    ("nextn", False, "NEXTN"),
    ("nextn", True, "NEXTN"),
    ("eagle", True, "EAGLE"),
    ("eagle3", True, "EAGLE3"),
    ("standalone", True, "STANDALONE"),
    ("ngram", False, "NGRAM"),
]


def test_sglang_base_argv():
    engine = sglang_engine(settings={"context_length": 65536, "mem_fraction_static": 0.8})
    _, command = build(engine, quant="hub", port=30000)
    assert command.argv == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "org/model-hub",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        "--context-length",
        "65536",
        "--mem-fraction-static",
        "0.8",
    ]


@pytest.mark.parametrize("kind,with_model,algorithm", SGLANG_DRAFTERS)
def test_sglang_every_drafter_kind(kind, with_model, algorithm):
    drafter = {"kind": kind, "n_max": 3, "with_model": with_model}
    manifests = (None, {"primary": "/x", "revision_sha": SHA_DRAFT}) if with_model else (None, None)
    _, command = build(
        sglang_engine(), drafter, quant="hub", draft_quant="hub", manifests=manifests
    )
    argv = command.argv
    assert after(argv, "--speculative-algorithm") == algorithm
    if with_model:
        assert after(argv, "--speculative-draft-model-path") == "org/draft-hub"
        assert after(argv, "--speculative-draft-model-revision") == SHA_DRAFT
    else:
        assert "--speculative-draft-model-path" not in argv
    if algorithm == "NGRAM":
        assert after(argv, "--speculative-num-draft-tokens") == "3"
        assert "--speculative-num-steps" not in argv
    else:
        assert after(argv, "--speculative-num-steps") == "3"
        assert after(argv, "--speculative-eagle-topk") == "1"
        assert after(argv, "--speculative-num-draft-tokens") == "4"


def test_sglang_drafter_settings_override_the_defaults():
    drafter = {
        "kind": "eagle",
        "n_max": 5,
        "with_model": True,
        "settings": {"eagle_topk": 4, "num_draft_tokens": 8},
    }
    _, command = build(sglang_engine(), drafter, quant="hub", draft_quant="hub")
    assert after(command.argv, "--speculative-eagle-topk") == "4"
    assert after(command.argv, "--speculative-num-draft-tokens") == "8"


# -- config errors name the key ----------------------------------------------------------------
@pytest.mark.parametrize(
    "engine,kind",
    [
        (vllm_engine(), "draft-mtp"),
        (vllm_engine(), "nextn"),
        (sglang_engine(), "mtp"),
        (llamacpp_engine(), "eagle3"),
        (sglang_engine(), "draft_model"),
    ],
)
def test_unsupported_drafter_kind_is_rejected_naming_the_key(engine, kind):
    with pytest.raises(ConfigError, match=rf"config key 'cells\[0\]\.drafter'.*'{kind}'"):
        build(engine, {"kind": kind})


def test_bad_launch_and_port_are_named():
    with pytest.raises(ConfigError, match=r"engines\.e\.launch.*build"):
        build({"kind": "vllm", "launch": "build"})
    with pytest.raises(ConfigError, match=r"engines\.e\.binary"):
        build({"kind": "sglang", "launch": "native"})
    with pytest.raises(ConfigError, match=r"engines\.e\.settings\.port"):
        build(vllm_engine(settings={"port": "eighty"}))


# -- docker ------------------------------------------------------------------------------------
@pytest.fixture
def clean_hf_env(monkeypatch, tmp_path):
    for name in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_docker_llamacpp_full_image_mounts_and_publishes_on_loopback(clean_hf_env):
    engine = {
        "kind": "llamacpp",
        "launch": "docker",
        "docker": {"image": "ghcr.io/ggml-org/llama.cpp:full-cuda"},
        "settings": {"port": 8081, "n_gpu_layers": 99},
    }
    cell, command = build(engine, {"kind": "draft-mtp", "n_max": 4, "with_model": True}, port=41000)
    name = "llmbench-" + cell.id
    assert command.argv[:9] == [
        "docker",
        "run",
        "--gpus",
        "all",
        "-p",
        "127.0.0.1:41000:8081",
        "-v",
        "/models:/models:ro",
        "--name",
    ]
    image_at = command.argv.index("ghcr.io/ggml-org/llama.cpp:full-cuda")
    assert command.argv[image_at + 1 : image_at + 4] == ["--server", "-m", "/models/m.gguf"]
    assert after(command.argv, "--model-draft") == "/models/draft.gguf"
    assert command.argv[-4:] == ["--host", "0.0.0.0", "--port", "8081"]
    assert command.base_url == "http://127.0.0.1:41000"
    assert command.stop_argv == ["docker", "rm", "-f", name]
    assert command.alive_argv == ["docker", "inspect", "-f", "{{.State.Running}}", name]
    assert command.follow_argv is None


def test_docker_server_image_has_no_dispatcher_flag_and_0000_publishes_everywhere(clean_hf_env):
    engine = {
        "kind": "llamacpp",
        "launch": "docker",
        "docker": {"image": "ghcr.io/ggml-org/llama.cpp:server-cuda", "gpus": ""},
    }
    _, command = build(engine, port=8080, host="0.0.0.0")
    assert "--gpus" not in command.argv and "--server" not in command.argv
    assert after(command.argv, "-p") == "8080:8080"
    assert command.base_url == "http://127.0.0.1:8080"


def test_docker_hub_cache_symlinked_files_are_mounted_one_by_one(tmp_path, clean_hf_env):
    blobs = tmp_path / "hub" / "models--o--r" / "blobs"
    snap = tmp_path / "hub" / "models--o--r" / "snapshots" / SHA_MAIN
    (snap / "MTP").mkdir(parents=True)
    blobs.mkdir(parents=True)
    (blobs / "x1").write_text("main")
    (blobs / "x2").write_text("draft")
    os.symlink(blobs / "x1", snap / "main.gguf")
    os.symlink(blobs / "x2", snap / "MTP" / "draft.gguf")
    models = {
        "m": {
            "quants": {
                "q": {
                    "weights": {
                        "source": "hf",
                        "repo": "o/r",
                        "revision": "main",
                        "filename": "main.gguf",
                    }
                }
            }
        },
        "draft": {
            "quants": {
                "q": {
                    "weights": {
                        "source": "hf",
                        "repo": "o/r",
                        "revision": "main",
                        "filename": "MTP/draft.gguf",
                    }
                }
            }
        },
    }
    engine = {
        "kind": "llamacpp",
        "launch": "docker",
        "docker": {"image": "ghcr.io/ggml-org/llama.cpp:full-cuda"},
    }
    manifests = (
        {"primary": str(snap / "main.gguf"), "revision_sha": SHA_MAIN},
        {"primary": str(snap / "MTP" / "draft.gguf"), "revision_sha": SHA_MAIN},
    )
    _, command = build(
        engine, {"kind": "draft-mtp", "with_model": True}, models=models, manifests=manifests
    )
    mounts = [command.argv[i + 1] for i, t in enumerate(command.argv) if t == "-v"]
    assert mounts == [
        f"{blobs / 'x1'}:/models/main.gguf:ro",
        f"{blobs / 'x2'}:/models/MTP/draft.gguf:ro",
    ]
    assert after(command.argv, "-m") == "/models/main.gguf"
    assert after(command.argv, "--model-draft") == "/models/MTP/draft.gguf"
    # before the fetch, the plan shows the shared snapshot as one placeholder mount
    _, planned = build(engine, {"kind": "draft-mtp", "with_model": True}, models=models)
    assert after(planned.argv, "-v") == "<models>:/models:ro"
    assert "<models>" in planned.placeholders


def test_docker_vllm_mounts_the_hub_cache_the_weights_rule_used(
    tmp_path, clean_hf_env, monkeypatch
):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    engine = {
        "kind": "vllm",
        "launch": "docker",
        "docker": {"image": "vllm/vllm-openai:nightly", "detach": True},
        "env": {"VLLM_LOGGING_LEVEL": "INFO"},
    }
    manifests = (
        {
            "primary": str(tmp_path / "x"),
            "revision_sha": SHA_MAIN,
            "hub_cache": str(tmp_path / "cache" / "hub"),
        },
        None,
    )
    cell, command = build(engine, quant="hub", manifests=manifests, port=8000)
    argv = command.argv
    assert argv[:6] == ["docker", "run", "-d", "--gpus", "all", "--ipc=host"]
    assert after(argv, "-v") == f"{tmp_path / 'cache'}:/root/.cache/huggingface"
    assert "-e" in argv and "HF_TOKEN" in argv and "VLLM_LOGGING_LEVEL=INFO" in argv
    assert not any("hf_secret_value" in token for token in argv)
    image_at = argv.index("vllm/vllm-openai:nightly")
    assert argv[image_at + 1 : image_at + 4] == ["org/model-hub", "--revision", SHA_MAIN]
    assert command.follow_argv == ["docker", "logs", "-f", "llmbench-" + cell.id]
    # without a manifest: the environment's cache, written as users write it
    _, planned = build(engine, quant="hub", port=8000)
    expected = f"{clean_hf_env}/.cache/huggingface:/root/.cache/huggingface"
    assert after(planned.argv, "-v") == expected


def test_docker_sglang_shm_and_module_command(clean_hf_env):
    engine = {"kind": "sglang", "launch": "docker", "docker": {"image": "lmsysorg/sglang:latest"}}
    _, command = build(engine, quant="hub", port=30000)
    argv = command.argv
    assert after(argv, "--shm-size") == "32g"
    image_at = argv.index("lmsysorg/sglang:latest")
    assert argv[image_at + 1 : image_at + 6] == [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "org/model-hub",
    ]


def test_docker_command_override(clean_hf_env):
    engine = {
        "kind": "vllm",
        "launch": "docker",
        "docker": {
            "image": "my/vllm",
            "command": ["vllm", "serve"],
            "extra_args": ["--privileged"],
        },
    }
    _, command = build(engine, quant="hub")
    image_at = command.argv.index("my/vllm")
    assert command.argv[image_at - 1] == "--privileged"
    assert command.argv[image_at + 1 : image_at + 4] == ["vllm", "serve", "org/model-hub"]


# -- readouts ----------------------------------------------------------------------------------
VLLM_METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 20.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 360.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 200.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 60.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 90.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 50.0
"""


def test_vllm_spec_metrics_sum_engines_and_order_positions():
    counters = adapter_for("vllm").parse_spec_metrics(VLLM_METRICS)
    assert counters.drafts == 120.0
    assert counters.draft_tokens == 360.0
    assert counters.accepted_tokens == 200.0
    assert counters.accepted_per_pos == [90.0, 60.0, 50.0]


def test_sglang_accept_length_from_server_info():
    text = json.dumps({"version": "0.5.4", "internal_states": [{"avg_spec_accept_length": 2.41}]})
    adapter = adapter_for("sglang")
    assert adapter.parse_spec_metrics(text).accept_length == pytest.approx(2.41)
    assert adapter.parse_spec_metrics("not json").accept_length is None
    assert adapter.parse_version(json.loads(text)) == "0.5.4"


def test_flag_args_rendering():
    assert flag_args({"b": 1, "a": None, "c": True, "d": False, "e": {"x": 1}}, ("e",)) == [
        "--e",
        '{"x":1}',
        "--b",
        "1",
        "--c",
        "--no-d",
    ]


def test_native_llamacpp_on_hub_ggufs_shows_placeholders_until_fetched(tmp_path):
    models = {
        "m": {
            "quants": {
                "q": {
                    "weights": {
                        "source": "hf",
                        "repo": "o/r",
                        "revision": "main",
                        "filename": "main.gguf",
                    }
                }
            }
        },
        "draft": {
            "quants": {
                "q": {
                    "weights": {
                        "source": "hf",
                        "repo": "o/r",
                        "revision": "main",
                        "filename": "MTP/draft.gguf",
                    }
                }
            }
        },
    }
    drafter = {"kind": "draft-mtp", "with_model": True}
    _, planned = build(llamacpp_engine(), drafter, models=models)
    assert after(planned.argv, "-m") == "<m__q>"
    assert after(planned.argv, "--model-draft") == "<draft__q>"
    assert set(planned.placeholders) == {"<m__q>", "<draft__q>"}
    snap = str(tmp_path / "snap")
    manifests = ({"primary": f"{snap}/main.gguf"}, {"primary": f"{snap}/MTP/draft.gguf"})
    _, fetched = build(llamacpp_engine(), drafter, models=models, manifests=manifests)
    assert after(fetched.argv, "-m") == f"{snap}/main.gguf"
    assert after(fetched.argv, "--model-draft") == f"{snap}/MTP/draft.gguf"
    assert fetched.placeholders == {}


def test_sglang_reads_server_info_or_its_deprecated_alias(standin):
    """STAND-IN SGLang servers (SGLang cannot run here): a current build answers `/server_info`,
    an older one only `/get_server_info`; the version and the acceptance readout use whichever
    answers, `/server_info` first."""
    from workflow_scripts.cell.attempts import _scrape

    info = {"version": "0.5.23", "internal_states": [{"avg_spec_accept_length": 2.75}]}

    def server(paths: tuple[str, ...], seen: list[str]) -> str:
        async def handler(reader, writer):
            while True:
                _, path, _, _ = await standin.read_request(reader)
                seen.append(path)
                found = path in paths
                payload = json.dumps(info if found else {"detail": "Not Found"}).encode()
                status = b"200 OK" if found else b"404 Not Found"
                writer.write(
                    b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
                )
                await writer.drain()

        return standin.start(handler)

    adapter = adapter_for("sglang")
    for paths, expected in (
        (("/server_info", "/get_server_info"), ["/server_info"]),
        (("/get_server_info",), ["/server_info", "/get_server_info"]),
    ):
        seen: list[str] = []
        url = server(paths, seen)
        text = _scrape(url, adapter.paths_to_try(adapter.metrics_path))
        assert adapter.parse_spec_metrics(text).accept_length == pytest.approx(2.75)
        assert seen == expected
        assert adapter.server_version(url) == "0.5.23"
    silent: list[str] = []
    assert _scrape(server((), silent), adapter.paths_to_try(adapter.metrics_path)) is None
    assert silent == ["/server_info", "/get_server_info"]


def test_sglang_published_nextn_flags_in_the_published_order():
    """AxionML's NEXTN recipe as the published command writes it: the draft model, its
    quantization, steps, draft tokens, top-k; settings in SGLang's order (kv dtype after
    quantization), the config's extra flags last."""
    engine = sglang_engine(
        settings={
            "context_length": 65536,
            "quantization": "modelopt_fp4",
            "kv_cache_dtype": "fp8_e4m3",
            "attention_backend": "triton",
        },
        extra_args=["--mem-fraction-static", "0.85"],
    )
    drafter = {
        "kind": "nextn",
        "n_max": 5,
        "with_model": True,
        "settings": {"draft_model_quantization": "unquant"},
    }
    _, command = build(engine, drafter, quant="hub", draft_quant="hub", port=30000)
    assert command.argv[3:] == [
        "--model-path",
        "org/model-hub",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        "--context-length",
        "65536",
        "--quantization",
        "modelopt_fp4",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--attention-backend",
        "triton",
        "--speculative-algorithm",
        "NEXTN",
        "--speculative-draft-model-path",
        "org/draft-hub",
        "--speculative-draft-model-quantization",
        "unquant",
        "--speculative-num-steps",
        "5",
        "--speculative-num-draft-tokens",
        "6",
        "--speculative-eagle-topk",
        "1",
        "--mem-fraction-static",
        "0.85",
    ]


def test_docker_options_replace_the_adapters(clean_hf_env):
    engine = {
        "kind": "sglang",
        "launch": "docker",
        "docker": {"image": "img", "options": ["--ipc=host", "--shm-size", "128g"]},
    }
    _, command = build(engine, quant="hub", port=30000)
    assert command.argv[:8] == [
        "docker",
        "run",
        "--gpus",
        "all",
        "--ipc=host",
        "--shm-size",
        "128g",
        "-p",
    ]
    assert "32g" not in command.argv
