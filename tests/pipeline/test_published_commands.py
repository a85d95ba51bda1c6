"""The seeds' published cells, exactly: every cell of configs/gb10-gemma4.yaml prints its card's
server command token for token (tests/fixtures/published/gb10-gemma4.yaml holds the cards'
commands, their paths and revisions), but for the differences in ALLOWED_DIFFERENCES, and every
hub repo id and file name of the config is cased as its publisher cases it.

No stand-in: the plan command runs for real; the cards were read from the public repository."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support.engines import REPO
from workflow_scripts.config.matrix import load_cells, load_config_file
from workflow_scripts.config.plan import main

CONFIG = REPO / "configs" / "gb10-gemma4.yaml"
FIXTURE = yaml.safe_load((REPO / "tests/fixtures/published/gb10-gemma4.yaml").read_text())
PUBLISHED = {entry["cell"]: entry for entry in FIXTURE["cells"]}
OVERLAY_BUILD = REPO / "envs" / "sglang-gemma4-modelopt.Dockerfile"
PUBLISHER_HOME = "/home/gauravmm"  # the cards' machine: its models folder and $HOME
SHA = re.compile(r"^[0-9a-f]{40}$")

Tokens = list[str]


def drop_pairs(
    tokens: Tokens, flags: tuple[str, ...], value: Callable[[str], bool] = lambda _: True
) -> Tokens:
    """`tokens` without each `FLAG VALUE` pair whose flag is in `flags` and value `value` likes."""
    out, i = [], 0
    while i < len(tokens):
        if tokens[i] in flags and i + 1 < len(tokens) and value(tokens[i + 1]):
            i += 2
            continue
        out.append(tokens[i])
        i += 1
    return out


def dockerfile_args(path: Path = OVERLAY_BUILD) -> dict[str, str]:
    text = path.read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))
    args["TAG"] = re.search(r"-t (\S+) envs$", text, re.MULTILINE).group(1)
    return args


# -- the one place: every way a printed command may differ from its published one -------------
def overlay_built(published: Tokens, printed: Tokens) -> tuple[Tokens, Tokens]:
    """The SGLang wrapper started `IMAGE bash -lc '<overlay>; <launch>'`; the config runs <launch>
    in an image built from IMAGE with the same overlay (envs/sglang-gemma4-modelopt.Dockerfile)."""
    if published[-3:-1] != ["bash", "-lc"]:
        return published, printed
    image, script = published[-4], published[-1].strip().splitlines()
    *overlay, launch = script
    build = dockerfile_args()
    assert build["BASE"].split("@")[0] == image, "the build starts from the published image"
    assert f"git clone {build['SGLANG_REPO']} /sgl-workspace/sglang" in overlay
    assert f'git checkout "{build["SGLANG_BRANCH"]}"' in overlay
    assert (
        f'pip install "git+https://github.com/huggingface/transformers.git@{build["TRANSFORMERS_REF"]}"'
        in overlay
    )  # noqa: E501
    return [*published[:-4], build["TAG"], *shlex.split(launch)], printed


def host_folders(published: Tokens, printed: Tokens) -> tuple[Tokens, Tokens]:
    def local(token: str) -> str:
        token = token.replace(f"{PUBLISHER_HOME}/models:", "<models>:")
        return token.replace(f"{PUBLISHER_HOME}/", "~/")

    return [local(t) for t in published], printed


def secrets_by_name(published: Tokens, printed: Tokens) -> tuple[Tokens, Tokens]:
    is_token = lambda v: v == "HF_TOKEN" or v.startswith("HF_TOKEN=")  # noqa: E731
    return drop_pairs(published, ("--env", "-e"), is_token), drop_pairs(printed, ("-e",), is_token)


def gpt_oss_plumbing(published: Tokens, printed: Tokens) -> tuple[Tokens, Tokens]:
    tiktoken = lambda v: "tiktoken_encodings" in v.lower()  # noqa: E731
    return drop_pairs(published, ("-v", "--env"), tiktoken), printed


def host_binding(published: Tokens, printed: Tokens) -> tuple[Tokens, Tokens]:
    return [
        f"127.0.0.1:{t}" if i and published[i - 1] == "-p" else t for i, t in enumerate(published)
    ], printed


def container_name(published: Tokens, printed: Tokens) -> tuple[Tokens, Tokens]:
    names = [printed[i + 1] for i, t in enumerate(printed) if t == "--name"]
    assert all(n.startswith("llmbench-") for n in names), names
    return drop_pairs(published, ("--name",)), drop_pairs(printed, ("--name",))


def metrics_on(published: Tokens, printed: Tokens) -> tuple[Tokens, Tokens]:
    return published, [t for t in printed if t != "--metrics"]


def pinned_revisions(published: Tokens, printed: Tokens) -> tuple[Tokens, Tokens]:
    flags = ("--revision", "--speculative-draft-model-revision")
    out = drop_pairs(printed, flags, lambda v: bool(SHA.match(v)))
    for i, token in enumerate(out):
        if i and out[i - 1] == "--speculative-config":
            config = json.loads(token)
            if SHA.match(str(config.get("revision", ""))):
                del config["revision"]
            out[i] = json.dumps(config, separators=(",", ":"))
    return published, out


ALLOWED_DIFFERENCES: tuple[tuple[str, str, Callable], ...] = (
    (
        "overlay built",
        "SGLang: the wrapper's at-start branch overlay, built once into an image "
        "from the same base (envs/sglang-gemma4-modelopt.Dockerfile); a branch is not a pin",
        overlay_built,
    ),
    (
        "host folders",
        "the publisher's folders (/home/gauravmm/models, $HOME) as the plan writes a "
        "user's: <models>, ~",
        host_folders,
    ),
    (
        "secrets by name",
        "the wrapper's `--env HF_TOKEN=<value>`: the pipeline passes `-e HF_TOKEN` "
        "by name, only when it is set",
        secrets_by_name,
    ),
    (
        "gpt-oss plumbing",
        "the SGLang wrapper's tiktoken mount and TIKTOKEN_ENCODINGS_BASE, which only gpt-oss reads",
        gpt_oss_plumbing,
    ),
    ("host binding", "the port published on 127.0.0.1 only", host_binding),
    (
        "container name",
        "`--name llmbench-<cell>`, so teardown is `docker rm -f NAME`",
        container_name,
    ),
    ("--metrics", "llama.cpp's /metrics on, for the spec-decode counters", metrics_on),
    (
        "--revision <sha>",
        "the hub commit the weights rule resolved (`--revision`, "
        "`--speculative-draft-model-revision`, vLLM's speculative-config `revision`)",
        pinned_revisions,
    ),
)


def compare(published: Tokens, printed: Tokens) -> tuple[Tokens, Tokens]:
    for _, _, rule in ALLOWED_DIFFERENCES:
        published, printed = rule(published, printed)
    return published, printed


# -- the published commands ---------------------------------------------------------------------
def shell_commands(run_command: str) -> list[Tokens]:
    """A card's run_command as commands: comments dropped, continuation lines joined."""
    lines = [line.strip() for line in run_command.replace("\\\n", " ").splitlines()]
    return [shlex.split(line) for line in lines if line and not line.startswith("#")]


def published_server(entry: dict) -> Tokens:
    if "server" in entry:  # a wrapper's docker run, expanded
        return shlex.split(entry["server"]) + ([entry["script"]] if "script" in entry else [])
    (docker,) = [c for c in shell_commands(entry["run_command"]) if c[:2] == ["docker", "run"]]
    return docker


def wrapper_call(entry: dict) -> tuple[dict[str, str], Tokens]:
    """(environment, arguments) of the card's wrapper call."""
    (call,) = [c for c in shell_commands(entry["run_command"]) if any(t.endswith(".sh") for t in c)]
    at = next(i for i, t in enumerate(call) if t.endswith(".sh"))
    assert call[at] == entry["wrapper"]
    return dict(t.split("=", 1) for t in call[:at]), call[at + 1 :]


def plain_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "HF_TOKEN")
    }
    return env


@pytest.fixture(scope="module")
def printed(tmp_path_factory) -> dict[str, str]:
    """`python -m workflow_scripts.plan --configfile configs/gb10-gemma4.yaml` on a fresh
    checkout (no weights fetched, no token): each cell's printed server line."""
    home = tmp_path_factory.mktemp("home")
    env = {**plain_env(), "HOME": str(home), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.plan", "--configfile", str(CONFIG)],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    servers = {}
    for i, line in enumerate(lines):
        if line.startswith("# cell ") and lines[i + 1] == "# server":
            servers[line.removeprefix("# cell ")] = lines[i + 2]
    return servers


def test_the_fixture_covers_every_cell_of_the_config():
    cells = load_cells(CONFIG)
    blocked = {e["cell"] for e in FIXTURE["blocked"]}
    assert {c.id for c in cells if not c.blocked} == set(PUBLISHED)
    assert {c.id for c in cells if c.blocked} == blocked
    for entry in [*FIXTURE["cells"], *FIXTURE["blocked"]]:
        assert entry["card"].startswith("_configs/") and SHA.match(entry["revision"])


@pytest.mark.parametrize("cell", list(PUBLISHED))
def test_printed_command_is_the_published_one(cell, printed):
    published, ours = compare(published_server(PUBLISHED[cell]), shlex.split(printed[cell]))
    assert ours == published


def test_every_allowed_difference_is_needed(printed):
    """Each rule changes some cell's comparison on a fresh checkout, none is there for nothing;
    `--revision` appears once weights are fetched (the test after the next)."""
    for name, _, rule in ALLOWED_DIFFERENCES:
        if name == "--revision <sha>":
            continue
        assert any(
            rule(published_server(e), shlex.split(printed[c]))
            != (published_server(e), shlex.split(printed[c]))
            for c, e in PUBLISHED.items()
        ), name


def test_a_changed_flag_or_file_name_breaks_the_pin(tmp_path, monkeypatch, capsys):
    """The comparison is strict: `-fa on` on a base cell, or ggml-org's file name with a
    lower-case b (the mistake this config once had), no longer matches."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    config = yaml.safe_load(CONFIG.read_text())
    config["engines"]["llamacpp-cuda"]["settings"]["flash_attn"] = "on"
    weights = config["models"]["gemma-4-12b"]["quants"]["q8_0"]["weights"]
    weights["filename"] = "gemma-4-12b-it-Q8_0.gguf"
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(config))
    for cell, needle in (
        ("gemma-4-12b__llamacpp-cuda__q4_k_m__none__sharegpt-c32", "-fa"),
        ("gemma-4-12b__llamacpp-cuda__q8_0__none__sharegpt-c32", "-12b-it-Q8_0"),
    ):
        assert main(["--configfile", str(edited), "--cell", cell]) == 0
        lines = capsys.readouterr().out.splitlines()
        line = lines[lines.index("# server") + 1]
        assert needle in line
        published, ours = compare(published_server(PUBLISHED[cell]), shlex.split(line))
        assert ours != published


def test_pinned_revisions_are_the_only_addition_once_weights_are_fetched(
    tmp_path, monkeypatch, capsys
):
    """With the hub weights fetched (manifests naming their commits), the vLLM and SGLang cells
    print `--revision <sha>` (and the draft model's), and nothing else changes."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for name in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    weights = tmp_path / "results" / "weights"
    weights.mkdir(parents=True)
    shas = {}
    for n, key in enumerate(
        ("gemma-4-12b__nvfp4", "gemma-4-12b__nvfp4-axionml", "gemma-4-12b-assistant__bf16")
    ):
        shas[key] = f"{n + 1}" * 40
        (weights / f"{key}.json").write_text(
            json.dumps(
                {
                    "primary": f"/snapshots/{key}",
                    "revision_sha": shas[key],
                    "hub_cache": str(home / ".cache" / "huggingface" / "hub"),
                }
            )
        )
    hub_cells = [c for c in PUBLISHED if "__vllm-" in c or "__sglang__" in c]
    assert len(hub_cells) == 4
    for cell in hub_cells:
        assert main(["--configfile", str(CONFIG), "--cell", cell]) == 0
        lines = capsys.readouterr().out.splitlines()
        ours = shlex.split(lines[lines.index("# server") + 1])
        main_key = "gemma-4-12b__nvfp4-axionml" if "__sglang__" in cell else "gemma-4-12b__nvfp4"
        assert ours[ours.index("--revision") + 1] == shas[main_key]
        if "nextn" in cell:
            flag = ours.index("--speculative-draft-model-revision")
            assert ours[flag + 1] == shas["gemma-4-12b-assistant__bf16"]
        if "mtp-assistant" in cell:
            spec = json.loads(ours[ours.index("--speculative-config") + 1])
            assert spec["revision"] == shas["gemma-4-12b-assistant__bf16"]
        published, ours = compare(published_server(PUBLISHED[cell]), ours)
        assert ours == published


@pytest.mark.parametrize("cell", [c for c, e in PUBLISHED.items() if "wrapper" in e])
def test_wrapper_expansions_carry_the_cards_arguments(cell):
    """Each hand-expanded wrapper command holds what the card passed: the model, context and
    concurrency where the wrapper puts them, the image the card records, and the card's extra
    flags last, in order."""
    entry = PUBLISHED[cell]
    env, args = wrapper_call(entry)
    model, ctx, conc, num_prompts, max_seconds, max_tokens, *extra = args
    assert (num_prompts, max_seconds, max_tokens) == ("1000", "900", "256")
    server = shlex.split(entry["server"])
    image = entry["engine_image"].split("@")[0]
    assert image in server and env.get("SGLANG_IMAGE", image) == image
    if "script" in entry:
        launch = shlex.split(entry["script"].strip().splitlines()[-1])
        assert launch[:9] == [
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            model,
            "--host",
            "0.0.0.0",
            "--port",
            "30000",
        ]
        assert launch[9:11] == ["--context-length", ctx] and launch[11:] == extra
        script = entry["script"]
        assert f'git checkout "{env["SGLANG_BRANCH"]}"' in script
        assert f"transformers.git@{env['TRANSFORMERS_REF']}" in script
    else:
        after = server[server.index(image) + 1 :]
        assert after[0] == model
        assert after[after.index("--max-model-len") + 1] == ctx
        assert after[after.index("--max-num-seqs") + 1] == conc
        assert after[len(after) - len(extra) :] == extra if extra else True
    assert "--name" in server and model.replace("/", "-") in server[server.index("--name") + 1]


def test_the_overlay_build_is_the_published_overlay():
    """The Dockerfile the SGLang engine's image comes from starts from the digest the cards
    record and applies the cards' branch and transformers commit; the config runs its tag."""
    build = dockerfile_args()
    for entry in PUBLISHED.values():
        if "script" not in entry:
            continue
        env, _ = wrapper_call(entry)
        assert build["BASE"] == entry["engine_image"]
        assert build["BASE"].startswith(env["SGLANG_IMAGE"] + "@sha256:")
        assert build["SGLANG_BRANCH"] == env["SGLANG_BRANCH"]
        assert build["TRANSFORMERS_REF"] == env["TRANSFORMERS_REF"]
        assert "bzhng-development/sglang" in build["SGLANG_REPO"]
    config = load_config_file(CONFIG)
    assert config["engines"]["sglang"]["docker"]["image"] == build["TAG"]


# -- hub ids and file names, as cased on the hub ------------------------------------------------
# How each publisher names its Gemma-4-12B repos and files (REFERENCE.md, "Where the published
# commands live", checked against the cards' source_repo and `-m` paths below). Matched with
# fnmatchcase: a file name only matches as cased.
HUB_NAMES = {
    "ggml-org/gemma-4-12B-it-GGUF": "gemma-4-12B-it-*.gguf",
    "unsloth/gemma-4-12b-it-GGUF": "gemma-4-12b-it-*.gguf",
    "RedHatAI/gemma-4-12B-it-NVFP4": None,
    "AxionML/Gemma-4-12B-NVFP4": None,
    "google/gemma-4-12B-it-assistant": None,
}


def hub_weights() -> list[tuple[str, dict]]:
    config = load_config_file(CONFIG)
    return [
        (f"{model}__{quant}", spec["weights"])
        for model, info in config["models"].items()
        for quant, spec in info["quants"].items()
        if spec["weights"]["source"] == "hf"
    ]


@pytest.mark.parametrize(("key", "weights"), hub_weights())
def test_hub_repo_ids_and_file_names_are_cased_as_published(key, weights):
    assert weights["repo"] in HUB_NAMES, f"{key}: {weights['repo']}: not a publisher's id as cased"
    pattern = HUB_NAMES[weights["repo"]]
    filename = weights.get("filename")
    if pattern is None:
        assert filename is None, f"{key}: a checkpoint folder, loaded whole"
        return
    name = filename.removeprefix("MTP/")
    assert fnmatch.fnmatchcase(name, pattern), f"{key}: {filename} is not cased like {pattern}"


def test_file_names_are_the_ones_the_cards_load():
    """Each llama.cpp cell's GGUFs are the files its card's command loads (`-m`, `--model-draft`
    under /models), and each card's source_repo is the repo they come from."""
    cells = {c.id: c for c in load_cells(CONFIG)}
    for cell_id, entry in PUBLISHED.items():
        if "server" in entry:
            continue
        docker = published_server(entry)
        cell = cells[cell_id]
        assert docker[docker.index("-m") + 1] == "/models/" + cell.weights["filename"]
        if cell.drafter_weights:
            draft = docker[docker.index("--model-draft") + 1]
            assert draft == "/models/" + cell.drafter_weights["filename"]


def test_each_cell_names_the_card_it_reproduces():
    for cell in load_cells(CONFIG):
        if cell.blocked:
            (entry,) = [e for e in FIXTURE["blocked"] if e["cell"] == cell.id]
            assert entry["card"] in cell.blocked
            continue
        entry = PUBLISHED[cell.id]
        source = cell.reference["source"]
        assert entry["card"] in source and entry["revision"] in source
        assert source.startswith(FIXTURE["repository"])
