"""envs/bench.yaml, the environment every rule names for `--software-deployment-method conda`,
pins what pyproject.toml asks for: each dependency (with its extras) at a version inside
pyproject's range. The slow test in tests/pipeline/test_conda_deployment.py builds it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
ENV_FILE = REPO / "envs" / "bench.yaml"


def env_pins() -> dict[str, Requirement]:
    spec = yaml.safe_load(ENV_FILE.read_text())
    pip = next(dep["pip"] for dep in spec["dependencies"] if isinstance(dep, dict))
    return {canonicalize_name(Requirement(line).name): Requirement(line) for line in pip}


def test_every_dependency_is_pinned_inside_its_range():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = env_pins()
    assert pins, ENV_FILE
    for line in project["dependencies"]:
        wanted = Requirement(line)
        pin = pins.get(canonicalize_name(wanted.name))
        assert pin is not None, f"{ENV_FILE.name} lacks {wanted.name}"
        assert wanted.extras <= pin.extras, f"{pin} drops the extras of {wanted}"
        (pinned,) = [spec.version for spec in pin.specifier if spec.operator == "=="]
        assert wanted.specifier.contains(pinned), f"{pin} is outside pyproject's {wanted}"


def test_the_env_asks_conda_only_for_python_and_pip():
    """Everything else comes from PyPI, like the pip-only install: one source for both modes."""
    spec = yaml.safe_load(ENV_FILE.read_text())
    conda_packages = [dep.split("=")[0] for dep in spec["dependencies"] if isinstance(dep, str)]
    assert sorted(conda_packages) == ["pip", "python"]
