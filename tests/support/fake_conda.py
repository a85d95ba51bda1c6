"""A stand-in for `conda`, for the one boundary this machine cannot cross: no conda channel is
reachable from it, only PyPI. It answers the commands Snakemake's conda deployment runs
(`conda info --json`, `--version`, `config --get channel_priority --json`, `env create --file
F --prefix P`, `clean`) and makes the environment the honest way it can: a venv of this very Python,
with the env file's `pip:` list installed from PyPI. An env file that asks for any other Python
or for a conda package is refused, so a test using this cannot pass on an env it did not build.

`install(base)` writes the launcher `<base>/bin/conda` and `<base>/bin/activate`, which
Snakemake sources before each job (`source <base>/bin/activate <env>`): it puts the env's bin
first on PATH and logs the env to `<base>/activations.log`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

VERSION = "25.1.1"  # Snakemake 9 asks for at least 24.7.1


def install(base: Path) -> Path:
    """The launcher and activate script under `base`/bin; returns that bin folder."""
    bin_dir = base / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    conda = bin_dir / "conda"
    script = Path(__file__).resolve()
    conda.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "{base}" "$@"\n')
    conda.chmod(0o755)
    (bin_dir / "activate").write_text(
        "# sourced by Snakemake: source <base>/bin/activate <env>\n"
        'export PATH="$1/bin:$PATH" CONDA_PREFIX="$1"\n'
        f'echo "$1" >> "{base / "activations.log"}"\n'
    )
    return bin_dir


def env_create(env_file: Path, prefix: Path) -> None:
    spec = yaml.safe_load(env_file.read_text())
    pip: list[str] = []
    python = None
    for dependency in spec.get("dependencies", []):
        if isinstance(dependency, dict) and set(dependency) == {"pip"}:
            pip += dependency["pip"]
        elif isinstance(dependency, str) and dependency.split("=")[0] == "python":
            python = dependency.partition("=")[2].lstrip("=") or None
        elif dependency != "pip":
            sys.exit(f"stand-in conda: cannot install conda package {dependency!r} (no channel)")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if python is None or not (python == here or python.startswith(here + ".")):
        sys.exit(f"stand-in conda: env asks for python {python!r}, can only make {here}")
    subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True)
    pip_install = [str(prefix / "bin" / "python"), "-m", "pip", "install"]
    subprocess.run([*pip_install, "--disable-pip-version-check", "-q", *pip], check=True)


def main(base: str, argv: list[str]) -> int:
    if argv == ["--version"]:
        print(f"conda {VERSION}")
    elif argv == ["info", "--json"]:
        print(json.dumps({"conda_prefix": base, "platform": "linux-64"}))
    elif argv[:3] == ["config", "--get", "channel_priority"]:
        print(json.dumps({"get": {"channel_priority": "strict"}, "rc": True}))
    elif argv[:2] == ["env", "create"]:
        parser = argparse.ArgumentParser(prog="conda env create")
        parser.add_argument("--file", type=Path, required=True)
        parser.add_argument("--prefix", type=Path, required=True)
        parser.add_argument("--quiet", action="store_true")
        parser.add_argument("--no-default-packages", action="store_true")
        args = parser.parse_args(argv[2:])
        env_create(args.file, args.prefix)
    elif argv[:1] == ["clean"]:
        pass  # Snakemake's cleanup of package tarballs: the stand-in keeps none
    else:
        sys.exit(f"stand-in conda: unsupported command {' '.join(argv)!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2:]))
