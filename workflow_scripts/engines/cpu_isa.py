"""The instruction-set features a native build compiles in, as this machine's compiler sees
them: the part of a native binary's identity that comes from the CPU that built it.

Asking the compiler (`-march=native`, predefined macros) rather than reading /proc/cpuinfo gives
exactly what `GGML_NATIVE` builds use, on x86 and Arm alike, without a table of CPU flags.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from dataclasses import dataclass

_DEFINE = re.compile(r"^#define (\S+)(?: (.*))?$")
# Feature macros are upper case (`__AVX2__`, `__AMX_TILE__`, `__ARM_FEATURE_SVE`); the CPU
# model's own macros (`__znver3__`, `__tune_sapphirerapids__`) are lower case and say nothing
# about which instructions the binary may use, so two CPUs of one ISA share a key.
_FEATURE_NAME = re.compile(r"^__[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True)
class CpuIsa:
    """Feature names a native build adds over the compiler's baseline, e.g. `avx2`, `amx_tile`."""

    features: tuple[str, ...]
    machine: str
    compiler: str = ""  # `cc --version`'s first line: features are read through its eyes

    def has(self, prefix: str) -> bool:
        return any(f.startswith(prefix) for f in self.features)

    @property
    def has_amx(self) -> bool:
        return self.has("amx")


def native_flag(machine: str | None = None) -> str:
    machine = (machine or platform.machine()).lower()
    return "-march=native" if machine in ("x86_64", "amd64", "i686", "i386") else "-mcpu=native"


def _macros(compiler: str, flags: list[str]) -> dict[str, str]:
    done = subprocess.run(
        [compiler, *flags, "-dM", "-E", "-x", "c", os.devnull],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{compiler} {' '.join(flags)} failed: {done.stderr.strip()[-300:]}")
    out = {}
    for line in done.stdout.splitlines():
        match = _DEFINE.match(line)
        if match:
            out[match.group(1)] = match.group(2) or ""
    return out


def isa_from_macros(
    baseline: dict[str, str], native: dict[str, str], machine: str, compiler: str = ""
) -> CpuIsa:
    """What `native` defines (or defines differently) beyond `baseline`, as feature names."""
    features = set()
    for name, value in native.items():
        if not _FEATURE_NAME.match(name) or baseline.get(name) == value:
            continue
        feature = name.strip("_").lower()
        features.add(f"{feature}={value}" if value not in ("", "1") else feature)
    return CpuIsa(tuple(sorted(features)), machine, compiler)


def native_isa(compiler: str | None = None) -> CpuIsa:
    """This machine's native ISA as the C compiler (`$CC`, else `cc`) would target it."""
    compiler = compiler or os.environ.get("CC") or "cc"
    machine = platform.machine().lower()
    try:
        baseline = _macros(compiler, [])
        native = _macros(compiler, [native_flag(machine)])
        version = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=60
        ).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"cannot ask the C compiler {compiler!r} for its ISA: {exc}") from exc
    return isa_from_macros(baseline, native, machine, version[0] if version else compiler)
