"""A cell's server command: the program (built binary, native binary or `python -m ...`, or a
`docker run`) plus the adapter's engine arguments, and how to watch and stop what it starts.

Docker launches publish the port on the configured host address (127.0.0.1 by default), mount
weights read-only under /models and the Hugging Face cache where the engine fetches by hub id,
and name the container after the cell so teardown is `docker rm -f NAME`.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..vocabulary import Cell, Status
from ..weights.hub import hub_cache_dir
from . import adapter_for
from .base import EngineAdapter, LaunchPaths, pinned

CONTAINER_MODELS = "/models"
CONTAINER_HF_HOME = "/root/.cache/huggingface"
# Secrets passed to a container by name only (`-e NAME`): the value never enters an argv.
PASSTHROUGH_ENV = ("HF_TOKEN",)
_DOCKER_NAME = re.compile(r"[^A-Za-z0-9_.-]")
_PLACEHOLDER = re.compile(r"^<[A-Za-z0-9_.-]+>")


@dataclass(frozen=True)
class WeightsRef:
    """One weights entry as a launch sees it: a host path once fetched, and its hub id."""

    key: str
    path: str | None  # host file or directory; None until the weights rule has fetched it
    relname: str  # its name under a mount root; keeps sub-folders such as `MTP/`
    repo: str | None = None
    revision: str | None = None  # the resolved commit when known, else the configured one
    hub_cache: str | None = None  # the hub cache the weights rule downloaded into

    @property
    def root(self) -> str | None:
        """The folder that holds `relname` (the snapshot of a hub repo)."""
        if self.path is None:
            return None
        if self.path.endswith("/" + self.relname):
            return self.path[: -len(self.relname) - 1]
        return str(Path(self.path).parent)

    @property
    def mount_name(self) -> str:
        """`relname` if it sits under `root`, else the file's own name."""
        if self.path is not None and not self.path.endswith("/" + self.relname):
            return Path(self.path).name
        return self.relname


@dataclass(frozen=True)
class ServerCommand:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict, repr=False)  # may hold the API key
    # `env` less the secrets: what a reader must set to rerun the command (LD_PRELOAD, ...)
    shown_env: dict[str, str] = field(default_factory=dict)
    stop_argv: list[str] | None = None  # `docker rm -f NAME`: also run before start
    served_model: str | None = None
    base_url: str = ""
    alive_argv: list[str] | None = None  # prints `true` while the container runs
    follow_argv: list[str] | None = None  # detached container: stream its log
    container: str | None = None
    placeholders: dict[str, str] = field(default_factory=dict)  # `<models>` -> what it stands for


def resolved_revision(manifest: dict[str, Any] | None) -> str | None:
    """The commit a weights manifest resolved its revision to; None when it names none."""
    if not manifest:
        return None
    resolved = manifest.get("resolved") or {}
    for value in (
        manifest.get("revision_sha"),
        resolved.get("revision_sha") if isinstance(resolved, dict) else None,
        manifest.get("resolved_revision"),
    ):
        if pinned(value):
            return value
    return None


def weights_ref(key: str, spec: dict[str, Any], manifest: dict[str, Any] | None) -> WeightsRef:
    """Where one weights entry is: from its manifest once fetched, else from the config."""
    usable = manifest if manifest and manifest.get("status") != Status.FAILED else None
    path = usable.get("primary") if usable else None
    if path is None and spec.get("source") == "local":
        path = str(Path(spec["path"]).expanduser())
    filename = spec.get("filename")
    if filename:
        relname = filename
    elif path:
        relname = Path(path).name
    elif spec.get("repo"):
        relname = spec["repo"].rsplit("/", 1)[-1]
    else:
        relname = key
    repo = spec.get("repo") if spec.get("source") == "hf" else None
    revision = (resolved_revision(usable) if usable else None) or spec.get("revision")
    hub_cache = usable.get("hub_cache") if usable else None
    return WeightsRef(key, path, relname, repo, revision, hub_cache)


def cell_weights(
    cell: Cell, weights_manifest: dict | None, drafter_manifest: dict | None
) -> tuple[WeightsRef, WeightsRef | None]:
    main = weights_ref(cell.weights_key, cell.weights, weights_manifest)
    drafter = None
    if cell.drafter_weights:
        drafter = weights_ref(cell.drafter_weights_key, cell.drafter_weights, drafter_manifest)
    return main, drafter


def container_name(cell: Cell) -> str:
    """Unique per cell, so a leftover from a killed run is found and removed by name."""
    return "llmbench-" + _DOCKER_NAME.sub("-", cell.id)


def hf_cache_mount(hub_cache: str | None = None) -> str:
    """The host's Hugging Face cache where the engine images look (`/root/.cache/huggingface`):
    the cache the weights rule filled (its manifest says which), else the environment's."""
    cache = Path(hub_cache) if hub_cache else hub_cache_dir()
    if cache.name == "hub":
        return f"{cache.parent}:{CONTAINER_HF_HOME}"
    return f"{cache}:{CONTAINER_HF_HOME}/hub"


def _placeholder(ref: WeightsRef, single: bool) -> str:
    return "<models>" if single else f"<{ref.key}>"


def docker_weights_mounts(
    refs: list[WeightsRef],
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Read-only mounts for files the server opens by path -> (mounts, container path per key,
    placeholders). One mount of their common folder when they share one (as users write it:
    `-v <models>:/models:ro`); else one mount per file, symlinks (hub cache blobs) resolved."""
    if not refs:
        return [], {}, {}
    roots = {(r.root,) if r.path else ("pending", r.revision, r.repo or r.key) for r in refs}
    linked = any(r.path and os.path.islink(r.path) for r in refs)
    if len(roots) == 1 and not linked:
        ref = refs[0]
        host = ref.root or _placeholder(ref, True)
        placeholders = {} if ref.root else {host: _describe_pending(ref)}
        paths = {r.key: f"{CONTAINER_MODELS}/{r.relname}" for r in refs}
        return [f"{host}:{CONTAINER_MODELS}:ro"], paths, placeholders
    mounts, paths, placeholders, used = [], {}, {}, set()
    for ref in refs:
        inside = f"{CONTAINER_MODELS}/{ref.mount_name}"
        if inside in used:
            inside = f"{CONTAINER_MODELS}/{ref.key}/{Path(ref.mount_name).name}"
        used.add(inside)
        host = os.path.realpath(ref.path) if ref.path else _placeholder(ref, False)
        if not ref.path:
            placeholders[host] = _describe_pending(ref)
        mounts.append(f"{host}:{inside}:ro")
        paths[ref.key] = inside
    return mounts, paths, placeholders


def _describe_pending(ref: WeightsRef, folder: bool = True) -> str:
    """What a placeholder stands for: the folder a container mounts, or the path a native
    server opens (a file or, for a Hugging Face checkpoint, a folder)."""
    where = f"hf {ref.repo}@{ref.revision}" if ref.repo else f"weights '{ref.key}'"
    what = f"the folder holding {ref.relname} of {where}" if folder else f"the path of {where}"
    return f"{what}, known once its weights step has run"


BUILT_PROGRAM = "<llama-server>"
BUILT_PROGRAM_NOTE = (
    "the llama-server the engine step builds: the first build variant that passes its smoke "
    "test on this machine (results/engines/<engine>.json names it)"
)


VENV_PYTHON = "<venv-python>"
VENV_PYTHON_NOTE = (
    "the Python of the venv the engine step installs the engine's packages into "
    "(results/engines/<engine>.json names it)"
)


def program_for(cell: Cell, engine_info: dict[str, Any]) -> list[str]:
    """The server program for native, build and venv launches (the engine stamp knows it best;
    before the engine step has run, a built program or a venv's Python is a placeholder)."""
    spec = cell.engine_spec
    program = engine_info.get("binary") or spec.get("binary")
    if not program and spec["launch"] == "build":
        return [BUILT_PROGRAM]
    if not program and spec["launch"] == "venv":
        module = spec["venv"].get("module") or adapter_for(spec["kind"]).server_module
        return [VENV_PYTHON, "-m", str(module)]
    if not program:
        raise ValueError(f"engine '{cell.engine}': no binary to launch")
    return shlex.split(str(program))


def _launch_paths(
    adapter: EngineAdapter,
    weights: WeightsRef,
    drafter: WeightsRef | None,
    host: str,
    port: int,
    local: dict[str, str],
) -> LaunchPaths:
    """Hub ids for engines that fetch by id; else the file as the server sees it, or the
    `<key>` placeholder while the weights are not fetched yet."""

    def use_repo(ref: WeightsRef | None) -> bool:
        return bool(ref and ref.repo and adapter.prefers_hub_id)

    def location(ref: WeightsRef) -> str:
        return (ref.repo if use_repo(ref) else local.get(ref.key)) or f"<{ref.key}>"

    return LaunchPaths(
        weights=location(weights),
        drafter_weights=location(drafter) if drafter else None,
        host=host,
        port=port,
        weights_repo=weights.repo if use_repo(weights) else None,
        weights_revision=weights.revision if use_repo(weights) else None,
        drafter_repo=drafter.repo if use_repo(drafter) else None,
        drafter_revision=drafter.revision if use_repo(drafter) else None,
    )


def server_secrets(spec: dict[str, Any], adapter: EngineAdapter) -> dict[str, str]:
    """The API key under the variable the server reads it from, when the config names where it
    is (`api_key_env`) and the environment has it. It goes into the server's environment only,
    never an argv; a cell whose variable is unset fails before launch (`process/auth`)."""
    variable = spec.get("api_key_env")
    value = os.environ.get(variable) if variable else None
    if not value or not adapter.api_key_env_var:
        return {}
    return {adapter.api_key_env_var: value}


def cell_server_command(
    cell: Cell,
    adapter: EngineAdapter,
    engine_info: dict[str, Any],
    weights: WeightsRef,
    drafter: WeightsRef | None,
    port: int,
) -> ServerCommand:
    """The full command for one cell; `port` is the host port clients connect to."""
    spec = cell.engine_spec
    host = cell.run.host
    client_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    base_url = f"http://{client_host}:{port}"
    refs = [r for r in (weights, drafter) if r is not None]
    by_path = [r for r in refs if not (r.repo and adapter.prefers_hub_id)]
    # What the engine step found the server needs (a venv's OpenMP preload), under the config's.
    env = {**engine_info.get("env", {}), **{k: str(v) for k, v in spec["env"].items()}}
    secrets = server_secrets(spec, adapter)
    if spec["launch"] in ("build", "native", "venv"):
        local = {r.key: r.path for r in by_path if r.path}
        paths = _launch_paths(adapter, weights, drafter, host, port, local)
        placeholders = {f"<{r.key}>": _describe_pending(r, False) for r in by_path if not r.path}
        program = program_for(cell, engine_info)
        if program == [BUILT_PROGRAM]:
            placeholders[BUILT_PROGRAM] = BUILT_PROGRAM_NOTE
        if program[0] == VENV_PYTHON:
            placeholders[VENV_PYTHON] = VENV_PYTHON_NOTE
        argv = [*program, *adapter.server_args(cell, paths)]
        return ServerCommand(
            argv,
            {**env, **secrets},
            shown_env=env,
            served_model=adapter.served_model(cell, paths),
            base_url=base_url,
            placeholders=placeholders,
        )
    if spec["launch"] != "docker":
        raise ValueError(f"engine '{cell.engine}': unknown launch mode '{spec['launch']}'")
    docker = spec["docker"]
    image = docker["image"]
    name = container_name(cell)
    inner_port = adapter.container_port(cell)
    mounts, local, placeholders = docker_weights_mounts(by_path)
    paths = _launch_paths(adapter, weights, drafter, "0.0.0.0", inner_port, local)
    argv = ["docker", "run"]
    if docker.get("detach"):
        argv.append("-d")
    if docker.get("gpus"):
        argv += ["--gpus", str(docker["gpus"])]
    argv += [str(a) for a in docker.get("options", adapter.docker_args)]
    publish = f"{port}:{inner_port}" if host in ("0.0.0.0", "") else f"{host}:{port}:{inner_port}"
    argv += ["-p", publish]
    by_hub = [r for r in refs if r not in by_path]
    if by_hub:
        argv += ["-v", hf_cache_mount(next((r.hub_cache for r in by_hub if r.hub_cache), None))]
    for mount in mounts:
        argv += ["-v", mount]
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    for secret in PASSTHROUGH_ENV:
        if by_hub and os.environ.get(secret):
            argv += ["-e", secret]
    if spec.get("api_key_env") and adapter.api_key_env_var:
        argv += ["-e", adapter.api_key_env_var]  # by name: docker copies it from its own env
    argv += ["--name", name]
    argv += [str(a) for a in docker["extra_args"]]
    program = docker.get("command") or adapter.docker_program(image)
    argv += [image, *program, *adapter.server_args(cell, paths)]
    return ServerCommand(
        argv,
        secrets,
        stop_argv=["docker", "rm", "-f", name],
        served_model=adapter.served_model(cell, paths),
        base_url=base_url,
        alive_argv=["docker", "inspect", "-f", "{{.State.Running}}", name],
        follow_argv=["docker", "logs", "-f", name] if docker.get("detach") else None,
        container=name,
        placeholders=placeholders,
    )


def request_fields(cell: Cell) -> dict[str, Any]:
    """What a cell's requests add to the body: a drafter cell asks for per-request speculative
    figures where the engine has them (ignored by servers that do not know the field). The cell's
    run, the plan and its card all take them from here."""
    if cell.drafter_spec is None:
        return {}
    return dict(adapter_for(cell.engine_kind).spec_request_fields)


def docker_inspect(container: str, field_format: str) -> str | None:
    """One field of a container's state (`{{.Image}}`, `{{.State.Pid}}`); None if unknown."""
    try:
        done = subprocess.run(
            ["docker", "inspect", "-f", field_format, container],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def container_image_id(container: str) -> str | None:
    """The image the running container was created from (the tag may have moved since the
    engine stamp recorded its digest)."""
    return docker_inspect(container, "{{.Image}}")


def container_pid(container: str) -> int | None:
    """The container's main process as the host sees it: its memory is the server's, not the
    docker client's."""
    pid = docker_inspect(container, "{{.State.Pid}}")
    return int(pid) if pid and pid.isdigit() and int(pid) > 0 else None


def with_env(env: dict[str, str], argv: list[str]) -> list[str]:
    """`NAME=value ... argv`, the way a shell line sets a program's environment."""
    return [f"{key}={value}" for key, value in sorted(env.items())] + list(argv)


def shell_join(argv: list[str]) -> str:
    """Quote for a POSIX shell; a path in the home folder is written `~/...` as people do."""
    home = str(Path.home())
    out = []
    for token in argv:
        if home != "/" and token.startswith(home + "/"):
            rest = token[len(home) + 1 :]
            quoted = shlex.quote(rest)
            out.append("~/" + rest if quoted == rest else shlex.quote(token))
        elif _PLACEHOLDER.match(token):
            out.append(token)  # a placeholder, written as the published commands write it
        else:
            out.append(shlex.quote(token))
    return " ".join(out)
