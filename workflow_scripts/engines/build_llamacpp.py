"""Build only `llama-server` from the llama.cpp tree vendored in a pinned llama-cpp-python sdist.

The binary is cached outside the clone, keyed by sdist version and cmake flags, so a second
clone (CI) and later runs reuse it. A file lock keeps two builds of one key from colliding.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import cache_dir
from ..registry_fetch import fetch_distribution, sha256_file

# Off by default: the web UI would be fetched from the network; OpenSSL/curl are not needed.
BASE_CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
)


@dataclass(frozen=True)
class LlamaCppBuild:
    """What to build: the sdist pin and the extra cmake flags (e.g. CUDA)."""

    package: str = "llama-cpp-python"
    version: str = "0.3.36"
    cmake_flags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def key(self) -> str:
        flags = "\n".join(BASE_CMAKE_FLAGS + tuple(self.cmake_flags))
        digest = hashlib.sha256(flags.encode()).hexdigest()[:12]
        return f"{self.package}-{self.version}-{digest}"


def install_dir(build: LlamaCppBuild) -> Path:
    return cache_dir("engines") / build.key


def binary_path(build: LlamaCppBuild) -> Path:
    return install_dir(build) / "bin" / "llama-server"


def _extract_vendor_tree(sdist: Path, dest: Path) -> Path:
    with tarfile.open(sdist) as archive:
        members = [
            m for m in archive.getmembers()
            if "/vendor/llama.cpp/" in m.name and "/.git/" not in m.name
        ]
        if not members:
            raise RuntimeError(f"{sdist} has no vendor/llama.cpp tree")
        archive.extractall(dest, members=members, filter="data")
    (tree,) = dest.glob("*/vendor/llama.cpp")
    return tree


def build_llama_server(
    build: LlamaCppBuild, log_path: str | Path | None = None, jobs: int | None = None
) -> dict:
    """Build (or reuse) llama-server; return provenance: binary, version, flags, sdist sha256."""
    target_dir = install_dir(build)
    lock_path = target_dir.with_suffix(".lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        info_path = target_dir / "build.json"
        if binary_path(build).exists() and info_path.exists():
            return json.loads(info_path.read_text())
        sdist = fetch_distribution(build.package, build.version, sdist=True)
        work = Path(tempfile.mkdtemp(prefix="build-", dir=cache_dir("engines")))
        try:
            tree = _extract_vendor_tree(sdist, work / "src")
            build_dir = work / "build"
            flags = list(BASE_CMAKE_FLAGS) + list(build.cmake_flags)
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            jobs_arg = str(jobs or os.cpu_count() or 1)
            configure = ["cmake", "-S", str(tree), "-B", str(build_dir), *generator, *flags]
            compile_ = [
                "cmake",
                "--build",
                str(build_dir),
                "--target",
                "llama-server",
                "-j",
                jobs_arg,
            ]
            with open(log_path or os.devnull, "a") as log:
                for step in (configure, compile_):
                    subprocess.run(step, check=True, stdout=log, stderr=subprocess.STDOUT)
            staged = work / "install"
            (staged / "bin").mkdir(parents=True)
            shutil.copy2(build_dir / "bin" / "llama-server", staged / "bin" / "llama-server")
            info = {
                "package": build.package,
                "version": build.version,
                "sdist": sdist.name,
                "sdist_sha256": sha256_file(sdist),
                "cmake_flags": flags,
                "binary": str(target_dir / "bin" / "llama-server"),
                "key": build.key,
            }
            (staged / "build.json").write_text(json.dumps(info, indent=2, sort_keys=True))
            if target_dir.exists():
                shutil.rmtree(target_dir)
            os.replace(staged, target_dir)
            return info
        finally:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--version", default=LlamaCppBuild.version)
    parser.add_argument("--cmake-flag", action="append", default=[])
    parser.add_argument("--log")
    args = parser.parse_args()
    info = build_llama_server(
        LlamaCppBuild(version=args.version, cmake_flags=tuple(args.cmake_flag)), args.log
    )
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
