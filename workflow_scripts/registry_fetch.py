"""Fetch pinned distributions from the package registry with pip, cached by exact version."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

from .paths import cache_dir
from .terminal import human_bytes, say


def sha256_file(path: str | Path, block_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(block_size):
            digest.update(block)
    return digest.hexdigest()


def _find_distribution(folder: Path, name: str, version: str, sdist: bool) -> Path | None:
    stem = name.replace("-", "_").lower()
    suffix = ".tar.gz" if sdist else ".whl"
    for candidate in sorted(folder.glob(f"*{suffix}")):
        lowered = candidate.name.lower().replace("-", "_")
        if lowered.startswith(f"{stem}_{version}".lower()) and candidate.name.endswith(suffix):
            return candidate
    return None


def fetch_distribution(name: str, version: str, sdist: bool = False) -> Path:
    """Return the cached wheel (or sdist) of `name==version`, downloading it once with pip."""
    folder = cache_dir("downloads", f"{name}-{version}")
    found = _find_distribution(folder, name, version, sdist)
    if found:
        return found
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "-d",
        str(folder),
        f"{name}=={version}",
    ]
    # `--no-binary` names only this package: `:all:` would also build pip's metadata step's
    # own build dependencies (CMake among them) from source, which takes longer than our build.
    cmd += ["--no-binary", name] if sdist else ["--only-binary", ":all:"]
    say(f"downloading {name}=={version} from the package registry")
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = _find_distribution(folder, name, version, sdist)
    if found:
        size = human_bytes(found.stat().st_size)
        say(f"downloaded {found.name}: {size} in {time.monotonic() - started:.0f} s")
    if proc.returncode != 0 and not found:
        raise RuntimeError(
            f"pip could not download {name}=={version}: {proc.stderr.strip()[-2000:]}"
        )
    if not found:
        raise RuntimeError(f"pip downloaded {name}=={version} but no file matched in {folder}")
    return found
