"""`--software-deployment-method conda`: Snakemake builds envs/bench.yaml once and runs every
job of the fixture results tree in it (the blocked cell, cards, tables, figures, the HTML
report), and the jobs find `workflow_scripts` in this checkout, not in the env.

Stand-in: `conda` itself (tests/support/fake_conda.py). This machine reaches PyPI but no conda
channel, so the stand-in builds the env as a venv of this Python with the env file's pip list
from PyPI, and refuses anything else the file asks for. Everything on Snakemake's side is real:
reading the rules' `conda:` files, the env's hash and location, creating it, activating it
before each job, running each script with the env's `python`.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.fake_conda import install
from tests.support.outputs import BLOCKED, fixture_cells, results_tree
from tests.support.pipeline import rules_run, run_snakemake

pytestmark = [pytest.mark.slow, pytest.mark.standin]


@pytest.fixture(scope="module")
def conda_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("conda-run")
    results = results_tree(workdir)
    conda_base = workdir / "stand-in-conda"
    bin_dir = install(conda_base)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    proc = run_snakemake(
        workdir, "--software-deployment-method", "conda", env={**os.environ, "PATH": path}
    )
    return workdir, results, conda_base, proc


def test_every_job_runs_and_the_report_is_written(conda_run):
    _, results, _, proc = conda_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert (results / "report.html").stat().st_size > 0
    assert (results / "summary" / "summary.csv").stat().st_size > 0
    for cell in fixture_cells():
        assert (results / "cells" / cell.id / "card.html").stat().st_size > 0, cell.id
    assert "blocked" in (results / "cells" / BLOCKED / "metrics.json").read_text()


def test_one_env_is_made_and_every_job_activates_it(conda_run):
    workdir, _, conda_base, proc = conda_run
    envs = [path.parent.parent for path in (workdir / ".snakemake" / "conda").glob("*/bin/python")]
    assert len(envs) == 1, envs
    activated = (conda_base / "activations.log").read_text().split()
    scripts_run = [rule for rule in rules_run(proc) if rule != "all"]  # `all` runs nothing
    assert {"cell", "card", "aggregate", "html_report"} <= set(scripts_run), scripts_run
    assert set(activated) == {str(envs[0])}
    assert len(activated) >= len(scripts_run)


def test_the_env_holds_the_dependencies_not_the_project(conda_run):
    """So the rules ran this checkout's code, found through the workflow's folder."""
    workdir, _, _, _ = conda_run
    (python,) = (workdir / ".snakemake" / "conda").glob("*/bin/python")
    deps = subprocess.run(
        [python, "-c", "import pandas, matplotlib, snakemake, pygments, psutil"],
        capture_output=True,
        text=True,
        cwd=workdir,
    )
    assert deps.returncode == 0, deps.stderr
    project = subprocess.run(
        [python, "-c", "import workflow_scripts"], capture_output=True, text=True, cwd=workdir
    )
    assert project.returncode != 0 and "No module named 'workflow_scripts'" in project.stderr
