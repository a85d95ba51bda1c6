"""Parsing the Snakefile imports neither pandas nor numpy nor matplotlib (the parse of a large
matrix pays for every import; only rule bodies need them). Proved in a subprocess whose import of
them fails when any frame of the workflow's own code asks for them (Snakemake's slurm plugin
imports pandas itself while plugins load, before the parse: that one is let through)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
GUARD = """
import builtins, os, sys
ROOT = os.environ["NO_PANDAS_ROOT"]
BLOCKED = ("pandas", "numpy", "matplotlib")
_import = builtins.__import__
def _guarded(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and name.split(".")[0] in BLOCKED:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename.startswith(ROOT):
                raise ImportError(
                    f"the parse imported {name} from {frame.f_code.co_filename}:{frame.f_lineno}"
                )
            frame = frame.f_back
    return _import(name, globals, locals, fromlist, level)
builtins.__import__ = _guarded
"""


def guarded_env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(GUARD)
    return {
        **os.environ,
        "NO_PANDAS_ROOT": str(ROOT),
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
    }


def test_the_guard_refuses_pandas_from_the_workflows_code(tmp_path):
    """The guard can fail: a module of the workflow that imports pandas is refused under it."""
    proc = subprocess.run(
        [sys.executable, "-c", "import workflow_scripts.outputs.search.tables"],
        cwd=ROOT,
        env=guarded_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "the parse imported pandas" in proc.stderr


PARSE_TIME = [
    *(f"workflow_scripts.outputs.search.{m}" for m in ("goals", "judgement", "walk", "outcome")),
    "workflow_scripts.fidelity.kld_plan",
]


def test_the_parse_time_modules_of_the_search_and_the_kl_steps_import_no_pandas(tmp_path):
    """What the DAG imports of the search's outputs (goal files, judgements, the walk, the
    outcome) and of the KL steps (their plan), each under the guard: none pulls pandas, numpy
    or matplotlib (the search's tables do: the guard refuses them, above)."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import {', '.join(PARSE_TIME)}"],
        cwd=ROOT,
        env=guarded_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("flag", ["--list", "-n"])
def test_parsing_the_snakefile_imports_no_pandas_numpy_or_matplotlib(tmp_path, flag):
    """The default config (a sweep and a search among its cells) listed and dry-run under the
    guard: the parse, the goal files and the search's walk pull none of them."""
    config = ROOT / "config.yaml"
    text = config.read_text()
    assert "search:" in text and "concurrency: [" in text, "the default has a search and a sweep"
    proc = subprocess.run(
        [str(SNAKEMAKE), flag, "--configfile", str(config), "-d", str(tmp_path / "wd")],
        cwd=ROOT,
        env=guarded_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "the parse imported" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
