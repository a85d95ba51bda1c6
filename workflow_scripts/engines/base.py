"""What every engine adapter answers: argv for a cell, readiness, metrics, version, what its
prefix cache served, and (for engines that split their context into slots) how much context one
request gets."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import requests

from ..loadgen.records import RequestRecord
from ..process.auth import auth_headers
from ..vocabulary import Cell, ConfigError

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def pinned(revision: str | None) -> str | None:
    """Only a commit pins weights; a branch or tag name is left to the engine's default."""
    return revision if isinstance(revision, str) and _COMMIT.match(revision) else None


@dataclass(frozen=True)
class LaunchPaths:
    """Where a cell's weights are, as the server sees them (host paths, or mounts in a
    container), and where it listens. Hub ids ride along for engines that fetch by id."""

    weights: str
    drafter_weights: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    weights_repo: str | None = None
    weights_revision: str | None = None  # a resolved commit, never a branch name
    drafter_repo: str | None = None
    drafter_revision: str | None = None


@dataclass
class SpecCounters:
    """Speculative-decoding counters read from an engine at one moment."""

    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_pos: list[float] = field(default_factory=list)
    accept_length: float | None = None  # engines that only report a running mean (SGLang)


def flag_args(settings: dict[str, Any], order: tuple[str, ...] = ()) -> list[str]:
    """Settings -> `--key-with-dashes value` flags: keys in `order` first (so a command reads
    like the engine's docs), the rest sorted. True -> `--flag`, False -> `--no-flag`,
    None -> nothing, mappings and lists -> compact JSON."""
    keys = [k for k in order if k in settings] + sorted(k for k in settings if k not in order)
    args: list[str] = []
    for key in keys:
        value = settings[key]
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if value is True:
            args.append(flag)
        elif value is False:
            args.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, dict | list):
            args += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            args += [flag, str(value)]
    return args


def hit_pct(hits: float | None, queried: float | None) -> float | None:
    """100 * hits / queried prompt tokens; None when nothing was counted (no figure, not 0)."""
    if hits is None or not queried:
        return None
    return 100.0 * hits / queried


def get_json(url: str, timeout_s: float = 10.0) -> Any:
    """GET a JSON document; None when the server does not answer it."""
    try:
        resp = requests.get(url, timeout=timeout_s, headers=auth_headers())
        return resp.json() if resp.status_code == 200 else None
    except (requests.RequestException, ValueError):
        return None


class EngineAdapter:
    """Base class; one subclass per engine kind, registered by `kind`."""

    kind: ClassVar[str] = ""
    drafter_kinds: ClassVar[frozenset[str]] = frozenset()
    # Drafter kinds that cannot run without draft weights (`drafters.<name>.model`).
    drafter_kinds_needing_model: ClassVar[frozenset[str]] = frozenset()
    launch_modes: ClassVar[frozenset[str]] = frozenset({"native", "docker"})
    health_path: ClassVar[str] = "/health"
    metrics_path: ClassVar[str | None] = "/metrics"
    version_path: ClassVar[str | None] = None
    # Paths older builds serve only under a deprecated name (SGLang `/get_server_info`).
    path_fallbacks: ClassVar[dict[str, str]] = {}
    # Fields a drafter cell's requests add so the server reports per-request speculative
    # figures (SGLang `return_spec_tokens_details`); servers that do not know them ignore them.
    spec_request_fields: ClassVar[dict[str, Any]] = {}
    default_port: ClassVar[int] = 8080
    # Engines that load a hub id themselves get the id (and the HF cache mounted in docker);
    # the others get a file path.
    prefers_hub_id: ClassVar[bool] = False
    # `docker run` options the engine needs (shared memory for NCCL / torch workers).
    docker_args: ClassVar[tuple[str, ...]] = ()
    # The module `python -m` runs for a venv launch (an engine shipped as a Python package).
    server_module: ClassVar[str | None] = None
    # The environment variable the server reads its API key from (`engines.<name>.api_key_env`
    # fills it); None: the engine takes a key only on its command line, which is recorded.
    api_key_env_var: ClassVar[str | None] = None
    # The weights formats the server loads ("gguf": a GGUF file, "hf": a Hugging Face folder);
    # a cell that hands it another is refused at validation. Empty: not declared, not checked.
    # An engine that prefers hub ids gets a hub entry as its repo id, which loads as "hf" only.
    weight_formats: ClassVar[frozenset[str]] = frozenset()
    # Settings of one shape, as JSON-schema types (`port: true` is not port 1, `ctx_size: {a: 1}`
    # no context); null leaves a flag out. The rest go through `flag_args` as they are.
    setting_types: ClassVar[dict[str, tuple[str, ...]]] = {"port": ("integer",)}
    # The settings that keep a server from serving a prompt from its prefix cache: a sweep's
    # points that share one server start run with them, so no point re-serves an earlier one's.
    prefix_cache_off: ClassVar[dict[str, Any]] = {}
    # Where the engine's prefix-cache counters are read, before and after the measured run
    # (None: it has none to read there; per-response figures come with the records).
    prefix_cache_path: ClassVar[str | None] = None
    # The launch modes whose provisioned build also gives `llama-perplexity`, which measures a
    # GGUF quant's KL divergence from the reference's logits (fidelity.kld); empty: none.
    perplexity_launches: ClassVar[frozenset[str]] = frozenset()

    def check_engine(self, name: str, spec: dict[str, Any]) -> None:
        where = f"engines.{name}"
        if spec["launch"] not in self.launch_modes:
            raise ConfigError(
                f"config key '{where}.launch': '{spec['launch']}' is not a launch mode of "
                f"{self.kind} (choose from {', '.join(sorted(self.launch_modes))})"
            )
        if spec["launch"] == "native" and not spec.get("binary"):
            raise ConfigError(f"config key '{where}.binary': native launch needs a binary")
        if spec["launch"] == "docker" and not spec.get("docker"):
            raise ConfigError(f"config key '{where}.docker': docker launch needs docker.image")
        if spec["launch"] == "venv":
            if not spec.get("venv"):
                raise ConfigError(f"config key '{where}.venv': venv launch needs venv.packages")
            if not (spec["venv"].get("module") or self.server_module):
                raise ConfigError(
                    f"config key '{where}.venv.module': {self.kind} names no server module"
                )
        port = spec.get("settings", {}).get("port")
        if port is not None and (not isinstance(port, int) or not 0 < port < 65536):
            raise ConfigError(f"config key '{where}.settings.port': expected a TCP port number")

    def check_drafter(
        self, name: str, spec: dict[str, Any], where: str, runnable: bool = True
    ) -> None:
        """Reject drafter kinds this engine lacks; a runnable cell's model drafter needs
        weights (a blocked cell is listed, never run, so it may lack them)."""
        if spec["kind"] not in self.drafter_kinds:
            raise ConfigError(
                f"config key '{where}': drafter '{name}' has kind '{spec['kind']}', which "
                f"{self.kind} does not support (supported: {', '.join(sorted(self.drafter_kinds))})"
            )
        if runnable and spec["kind"] in self.drafter_kinds_needing_model and "model" not in spec:
            raise ConfigError(
                f"config key '{where}': drafter '{name}' ({spec['kind']}) "
                "needs a draft model (drafters.<name>.model)"
            )

    def settings(self, cell: Cell) -> dict[str, Any]:
        """The engine's settings for this cell (config settings over adapter defaults)."""
        return dict(cell.engine_spec["settings"])

    def container_port(self, cell: Cell) -> int:
        """The port the server listens on (inside a container, or the preferred host port)."""
        return int(self.settings(cell).get("port") or self.default_port)

    def server_args(self, cell: Cell, paths: LaunchPaths) -> list[str]:
        """Engine arguments after the program (binary, `python -m ...` or docker image)."""
        raise NotImplementedError

    def venv_env(self, folder: str) -> dict[str, str]:
        """Environment a venv-launched server needs from what its venv ships (e.g. a preload)."""
        return {}

    def docker_program(self, image: str) -> list[str]:
        """What goes between the image and the engine arguments (empty: the entrypoint)."""
        return []

    def served_model(self, cell: Cell, paths: LaunchPaths) -> str | None:
        """The `model` name requests must carry; None when the server ignores it."""
        return None

    def parse_spec_metrics(self, text: str) -> SpecCounters:
        return SpecCounters()

    def prefix_cache_hit_pct(
        self, records: Sequence[RequestRecord], before: str | None, after: str | None
    ) -> float | None:
        """The percentage of the measured run's prompt tokens the engine served from its prefix
        cache, from `records` (the measured requests that completed) or from `prefix_cache_path`
        read `before` and `after` the run (None where it did not answer). None: not reported."""
        return None

    def turn_hit_pct(self, records: Sequence[RequestRecord]) -> float | None:
        """One conversation turn's hit rate from its completed requests' own figures (llama.cpp's
        timings): counters read at the run's edges cannot be split by turn."""
        return self.prefix_cache_hit_pct(records, None, None)

    def parse_version(self, document: Any) -> str | None:
        """The engine version from the JSON at `version_path`."""
        return None

    def paths_to_try(self, path: str | None) -> list[str]:
        """`path`, then its deprecated alias if the engine has one."""
        if not path:
            return []
        return [path, *([self.path_fallbacks[path]] if path in self.path_fallbacks else [])]

    def server_version(self, base_url: str) -> str | None:
        for path in self.paths_to_try(self.version_path):
            document = get_json(base_url + path)
            if document is not None:
                return self.parse_version(document)
        return None

    # Context per request. Engines that split their context across slots (llama.cpp) set
    # `splits_context` and override these; the others give every sequence the whole context.
    splits_context: ClassVar[bool] = False
    # The setting that bounds one request's prompt + answer in tokens on the whole server (a
    # slot of llama.cpp's holds less: the context guard's part), read at plan time; None: none.
    context_setting: ClassVar[str | None] = None

    def per_slot_context(self, cell: Cell) -> int | None:
        """Per-request context implied by the config, before the server runs."""
        return None

    def served_per_slot_context(self, base_url: str) -> int | None:
        """Per-request context the running server reports."""
        return None

    def trained_context(self, base_url: str) -> int | None:
        """The model's training context as the running server reports it."""
        return None

    def count_prompt_tokens(self, base_url: str, text: str, endpoint: str) -> int:
        """Tokens the server will see for one prompt, template included."""
        raise NotImplementedError(f"{self.kind} cannot count prompt tokens")

    def sized_settings(self, cell: Cell, per_slot_tokens: int) -> dict[str, Any]:
        """Settings that give every slot `per_slot_tokens` of context."""
        raise NotImplementedError(f"{self.kind} cannot size its context")

    def tokenizer_only_settings(self, cell: Cell) -> dict[str, Any]:
        """Settings for a short-lived server that only tokenizes (context sizing)."""
        raise NotImplementedError(f"{self.kind} has no tokenizer-only server")


class HubModelAdapter(EngineAdapter):
    """Engines that load a model by hub id (or a local path) and fetch it themselves (vLLM,
    SGLang): model, pinned revision, address, settings, drafter flags, extra args."""

    prefers_hub_id = True
    model_flag: ClassVar[tuple[str, ...]] = ()  # what precedes the model (vLLM: positional)
    # ... when started as `python -m <server_module>` (vLLM's module takes `--model`).
    module_model_flag: ClassVar[tuple[str, ...] | None] = None
    setting_order: ClassVar[tuple[str, ...]] = ()  # how the engine's docs order its flags

    def model_ref(self, paths: LaunchPaths) -> str:
        return paths.weights_repo or paths.weights

    @staticmethod
    def drafter_model(paths: LaunchPaths) -> tuple[str | None, str | None]:
        """The draft model (hub id or path) and its pinned revision, if the drafter has one."""
        model = paths.drafter_repo or paths.drafter_weights
        return model, pinned(paths.drafter_revision) if paths.drafter_repo else None

    def drafter_args(self, spec: dict[str, Any], paths: LaunchPaths) -> list[str]:
        raise NotImplementedError

    def server_args(self, cell: Cell, paths: LaunchPaths) -> list[str]:
        settings = {k: v for k, v in self.settings(cell).items() if k != "port"}
        flag = self.model_flag
        if cell.engine_spec["launch"] == "venv" and self.module_model_flag is not None:
            flag = self.module_model_flag
        args = [*flag, self.model_ref(paths)]
        revision = pinned(paths.weights_revision) if paths.weights_repo else None
        if revision:
            args += ["--revision", revision]
        args += ["--host", paths.host, "--port", str(paths.port)]
        args += flag_args(settings, self.setting_order)
        if cell.drafter_spec:
            args += self.drafter_args(cell.drafter_spec, paths)
        args += [str(a) for a in cell.engine_spec["extra_args"]]
        return args
