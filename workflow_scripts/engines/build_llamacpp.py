"""Build `llama-server`, `llama-quantize` and `llama-perplexity` from the llama.cpp tree vendored
in a pinned llama-cpp-python sdist, and keep that tree's Hugging Face -> GGUF converter beside them.

The programs come from one cmake build (the libraries compile once), so a quant made by
`llama-quantize`, the server that runs it and the perplexity tool that measures its KL divergence
(`fidelity_kld`) are the same llama.cpp; derived weights (`weights_derive`) and fidelity steps take
the tools from the engine stamp.

A build comes in variants of decreasing speed and increasing portability (`VARIANTS`); the
engine step tries them in order until one passes the smoke test (`engines.smoke`). Binaries
are cached outside the clone, keyed by sdist version, cmake flags, variant and, for a native
variant, the CPU features the compiler targeted: a shared cache (other clones, CI, Slurm
nodes on NFS) never hands a native binary to a CPU of another feature set, while a portable
build is shared by all. A file lock plus build-to-temp-then-rename keeps two builds of one key
(two clones, two jobs) from colliding.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..exits import describe_exit
from ..paths import cache_dir
from ..registry_fetch import fetch_distribution, sha256_file
from ..terminal import Throttle, say
from ..text import tail
from .cpu_isa import CpuIsa

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
_AMX_OFF = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")
_X86_SIMD_OFF = tuple(
    f"-DGGML_{name}=OFF" for name in ("AVX", "AVX2", "FMA", "F16C", "BMI2", "AVX_VNNI")
)


class BuildError(RuntimeError):
    """The build itself failed (configure or compile), as opposed to a binary that will not run."""


@dataclass(frozen=True)
class BuildVariant:
    """One way to build: cmake flags, compiler flags, and whether it depends on this CPU."""

    name: str
    cmake_flags: tuple[str, ...]
    compiler_flags: tuple[str, ...] = ()
    native: bool = False
    x86_only: bool = False
    needs_amx: bool = False  # only worth trying where native would compile AMX in
    describes: str = ""


# Tried in this order. Native is fastest; a CPU can advertise features it then traps on (AMX in
# some VMs: SIGILL at the first tile instruction), hence native without AMX; then GGML_NATIVE=OFF,
# which on x86 is the x86-64-v3 level (AVX2, FMA, F16C, BMI2) and on Arm the baseline; last, on
# x86, SSE4.2 only, for CPUs without AVX2.
VARIANTS = (
    BuildVariant("native", ("-DGGML_NATIVE=ON",), native=True, describes="-march=native"),
    BuildVariant(
        "native-no-amx",
        ("-DGGML_NATIVE=ON",),
        _AMX_OFF,
        native=True,
        needs_amx=True,
        describes="-march=native without AMX",
    ),
    BuildVariant("portable", ("-DGGML_NATIVE=OFF",), describes="GGML_NATIVE=OFF (x86: AVX2/FMA)"),
    BuildVariant(
        "baseline",
        ("-DGGML_NATIVE=OFF", *_X86_SIMD_OFF),
        x86_only=True,
        describes="GGML_NATIVE=OFF, SSE4.2 only",
    ),
)
VARIANT_NAMES = tuple(v.name for v in VARIANTS)


def variant_named(name: str) -> BuildVariant:
    for variant in VARIANTS:
        if variant.name == name:
            return variant
    raise ValueError(f"unknown build variant '{name}' (choose from {', '.join(VARIANT_NAMES)})")


def variants_to_try(isa: CpuIsa, names: tuple[str, ...] = VARIANT_NAMES) -> list[BuildVariant]:
    """The variants worth building on this CPU, in order: no-AMX only where native has AMX,
    the SSE4.2 baseline only on x86."""
    x86 = isa.machine in ("x86_64", "amd64", "i686", "i386")
    out = []
    for variant in map(variant_named, names):
        if (variant.needs_amx and not isa.has_amx) or (variant.x86_only and not x86):
            continue
        out.append(variant)
    return out


def _merge_compiler_flags(flags: list[str], extra: tuple[str, ...]) -> list[str]:
    """Add `extra` to CMAKE_C_FLAGS and CMAKE_CXX_FLAGS, keeping flags the user set there."""
    if not extra:
        return flags
    out = list(flags)
    for var in ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS"):
        prefix = f"-D{var}="
        found = [i for i, flag in enumerate(out) if flag.startswith(prefix)]
        if found:
            i = found[-1]
            out[i] = f"{out[i]} {' '.join(extra)}".replace("= ", "=")
        else:
            out.append(prefix + " ".join(extra))
    return out


@dataclass(frozen=True)
class LlamaCppBuild:
    """What to build: the sdist pin, the user's extra cmake flags (e.g. CUDA), the variant and,
    for a native variant, the CPU ISA it targets."""

    package: str = "llama-cpp-python"
    version: str = "0.3.36"
    cmake_flags: tuple[str, ...] = field(default_factory=tuple)
    variant: BuildVariant = VARIANTS[0]
    isa: CpuIsa | None = None

    @property
    def all_cmake_flags(self) -> list[str]:
        flags = [*BASE_CMAKE_FLAGS, *self.variant.cmake_flags, *self.cmake_flags]
        return _merge_compiler_flags(flags, self.variant.compiler_flags)

    @property
    def cpu_features(self) -> tuple[str, ...] | None:
        """What the binary needs from the CPU beyond the compiler's baseline (native only)."""
        if not self.variant.native:
            return None
        if self.isa is None:
            raise ValueError(f"variant '{self.variant.name}' needs the CPU's ISA for its key")
        return self.isa.features

    @property
    def key(self) -> str:
        material = "\n".join(self.all_cmake_flags)
        if self.cpu_features is not None:
            material += "\ncpu:" + ",".join(self.cpu_features)
        digest = hashlib.sha256(material.encode()).hexdigest()[:12]
        return f"{self.package}-{self.version}-{self.variant.name}-{digest}"


def build_plan(settings: dict, variant: BuildVariant, isa: CpuIsa | None) -> LlamaCppBuild:
    """The build an engine's `build` settings ask for in one variant (the ISA kept only for a
    native one, whose key it is part of)."""
    return LlamaCppBuild(
        **{key: str(settings[key]) for key in ("package", "version") if key in settings},
        cmake_flags=tuple(settings.get("cmake_flags", [])),
        variant=variant,
        isa=isa if variant.native else None,
    )


def install_dir(build: LlamaCppBuild) -> Path:
    return cache_dir("engines") / build.key


# Built together; the first is the server the engine runs, the others are tools beside it.
TARGETS = ("llama-server", "llama-quantize", "llama-perplexity")
# What `convert_hf_to_gguf.py` imports or reads from its tree (chat templates it may embed).
CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion", "gguf-py", "models/templates", "LICENSE")


def binary_path(build: LlamaCppBuild) -> Path:
    return install_dir(build) / "bin" / "llama-server"


def quantize_path(build: LlamaCppBuild) -> Path:
    return install_dir(build) / "bin" / "llama-quantize"


def perplexity_path(build: LlamaCppBuild) -> Path:
    return install_dir(build) / "bin" / "llama-perplexity"


def converter_tree(build: LlamaCppBuild) -> Path:
    """The Python part of the pinned tree (converter, `gguf-py`), kept after the build."""
    return install_dir(build) / "llama.cpp"


def _is_complete(build: LlamaCppBuild) -> bool:
    """A cached build counts only with every target and the converter (one made before
    `llama-quantize` or `llama-perplexity` was a target is rebuilt once, under the same key)."""
    folder = install_dir(build)
    return (
        all((folder / "bin" / target).is_file() for target in TARGETS)
        and (converter_tree(build) / CONVERTER_PARTS[0]).is_file()
        and (folder / "build.json").is_file()
    )


def _keep_converter(tree: Path, dest: Path) -> None:
    for part in CONVERTER_PARTS:
        source = tree / part
        if source.is_dir():
            shutil.copytree(source, dest / part)
        elif source.is_file():
            (dest / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / part)


def _extract_vendor_tree(sdist: Path, dest: Path) -> Path:
    with tarfile.open(sdist) as archive:
        members = [
            m
            for m in archive.getmembers()
            if "/vendor/llama.cpp/" in m.name and "/.git/" not in m.name
        ]
        if not members:
            raise BuildError(f"{sdist} has no vendor/llama.cpp tree")
        archive.extractall(dest, members=members, filter="data")
    (tree,) = dest.glob("*/vendor/llama.cpp")
    return tree


# `[57/206] Building CXX object ...` (Ninja) or `[ 45%] Building ...` (Make).
_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE_STEP = re.compile(r"^\[\s*(\d+)%\]")


def build_progress(line: str) -> str | None:
    """`57/206` or `45%` from one line of build output; None for other lines."""
    if match := _NINJA_STEP.match(line):
        return f"{match.group(1)}/{match.group(2)}"
    if match := _MAKE_STEP.match(line):
        return f"{match.group(1)}%"
    return None


def compiler_cache_flags() -> list[str]:
    """ccache, when installed, as the compiler launcher: variants and rebuilds share every object
    whose flags did not change (all but the CPU backend's). Not part of the key: it changes how
    fast a binary is made, not which binary."""
    if not shutil.which("ccache"):
        return []
    return ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]


def compiler_cache_env(work: Path) -> dict[str, str]:
    """Paths under the (temporary) build folder hashed as relative ones, so the next build, in
    another temporary folder, hits the same cache entries."""
    return {**os.environ, "CCACHE_BASEDIR": str(work), "CCACHE_NOHASHDIR": "true"}


def _run_step(
    argv: list[str],
    log,
    label: str,
    progress: Callable[[str], None],
    env: dict[str, str] | None = None,
) -> None:
    """Run one build step; every line to the log, its progress to the terminal (throttled)."""
    throttle = Throttle(10.0)
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        env=env,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        step = build_progress(line)
        if step and throttle.ready():
            progress(f"{label}: [{step}]")
    log.flush()
    if proc.wait() != 0:
        raise BuildError(
            f"{argv[0]} {argv[1]} {describe_exit(proc.returncode)}; last lines of {log.name}:\n"
            f"{tail(log.name, 15)}"
        )


def build_llama_server(
    build: LlamaCppBuild,
    log_path: str | Path | None = None,
    jobs: int | None = None,
    progress: Callable[[str], None] = say,
) -> dict:
    """Build (or reuse) llama-server, llama-quantize and llama-perplexity; return provenance:
    their paths, the converter tree, flags, sdist sha256."""
    target_dir = install_dir(build)
    label = f"llama-server build ({build.variant.name})"
    # one lock per key (`with_suffix` would cut the key at its version's dots and make one lock
    # for every build of the version)
    with open(target_dir.parent / f"{target_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        info_path = target_dir / "build.json"
        if _is_complete(build):
            return json.loads(info_path.read_text())
        sdist = fetch_distribution(build.package, build.version, sdist=True)
        work = Path(tempfile.mkdtemp(prefix="build-", dir=cache_dir("engines")))
        started = time.monotonic()
        progress(
            f"{label}: building from {sdist.name} (a few minutes on a small machine); "
            f"log: {log_path or 'none'}"
        )
        try:
            tree = _extract_vendor_tree(sdist, work / "src")
            build_dir = work / "build"
            flags = build.all_cmake_flags
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            jobs_arg = str(jobs or os.cpu_count() or 1)
            configure = ["cmake", "-S", str(tree), "-B", str(build_dir), *generator, *flags]
            configure += compiler_cache_flags()
            compile_ = ["cmake", "--build", str(build_dir), "--target", *TARGETS]
            compile_ += ["-j", jobs_arg]
            with open(log_path or work / "build.log", "a") as log:
                for step in (configure, compile_):
                    _run_step(step, log, label, progress, compiler_cache_env(work))
            staged = work / "install"
            (staged / "bin").mkdir(parents=True)
            for target in TARGETS:
                shutil.copy2(build_dir / "bin" / target, staged / "bin" / target)
            _keep_converter(tree, staged / converter_tree(build).name)
            info = {
                "package": build.package,
                "version": build.version,
                "sdist": sdist.name,
                "sdist_sha256": sha256_file(sdist),
                "cmake_flags": flags,
                "variant": build.variant.name,
                "cpu_features": list(build.cpu_features) if build.variant.native else None,
                "compiler": build.isa.compiler if build.isa else None,
                "binary": str(binary_path(build)),
                "quantize": str(quantize_path(build)),
                "perplexity": str(perplexity_path(build)),
                "tree": str(converter_tree(build)),
                "key": build.key,
                "build_s": round(time.monotonic() - started, 1),
            }
            (staged / "build.json").write_text(json.dumps(info, indent=2, sort_keys=True))
            if target_dir.exists():
                shutil.rmtree(target_dir)
            os.replace(staged, target_dir)
            progress(f"{label}: done in {info['build_s']:.0f} s")
            return info
        finally:
            shutil.rmtree(work, ignore_errors=True)


def perplexity_of(stamp: dict, settings: dict, isa: Callable[[], CpuIsa]) -> tuple[str, dict]:
    """`llama-perplexity` of the build an engine stamp names, and that build's record. A stamp
    made before the tool was a target names a cached build without it: that build is completed
    under the same key (the key of `settings` in the stamp's variant must be the stamp's, else
    the engine step must run again). `isa` is asked only for a native variant."""
    if stamp.get("perplexity") and Path(stamp["perplexity"]).is_file():
        return stamp["perplexity"], stamp
    variant = variant_named(str(stamp.get("variant")))
    plan = build_plan(settings, variant, isa() if variant.native else None)
    if plan.key != stamp.get("key"):
        raise BuildError(
            f"the engine stamp names build {stamp.get('key')}, its settings here make "
            f"{plan.key}: rerun its engine step (snakemake --forcerun engine)"
        )
    info = build_llama_server(plan)
    return info["perplexity"], info
