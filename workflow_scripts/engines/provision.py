"""Provision an engine once per config entry: build it, find it, or pull its image; record
what it is (binary path, version, build flags or image digest) in a small JSON stamp."""

from __future__ import annotations

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
        program = spec["binary"].split()
        resolved = shutil.which(program[0])
        if resolved is None:
            raise FileNotFoundError(f"engines.{name}.binary: '{program[0]}' not found")
        info["binary"] = " ".join([resolved, *program[1:]])
        info["version"] = binary_version([resolved, *program[1:]])
    else:
        raise ValueError(f"engines.{name}.launch: '{launch}' cannot be provisioned yet")
    return info


def provision_to(name: str, spec: dict[str, Any], stamp_path: str, log_path: str | None) -> None:
    write_json(stamp_path, provision(name, spec, log_path))
