"""Provision an engine once per config entry: build it, find it, or pull its image; record
what it is (binary path, version, build flags or image digest) in a small JSON stamp."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from typing import Any

from ..atomic import write_json
from .build_llamacpp import LlamaCppBuild, build_llama_server


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


def provision(name: str, spec: dict[str, Any], log_path: str | None = None) -> dict[str, Any]:
    launch = spec["launch"]
    info: dict[str, Any] = {"engine": name, "kind": spec["kind"], "launch": launch}
    if launch == "build":
        build = spec.get("build", {})
        built = build_llama_server(
            LlamaCppBuild(
                package=build.get("package", "llama-cpp-python"),
                version=str(build.get("version", "0.3.36")),
                cmake_flags=tuple(build.get("cmake_flags", [])),
            ),
            log_path=log_path,
        )
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
    else:
        raise ValueError(f"engines.{name}.launch: unknown launch mode '{launch}'")
    return info


def provision_to(name: str, spec: dict[str, Any], stamp_path: str, log_path: str | None) -> None:
    write_json(stamp_path, provision(name, spec, log_path))
