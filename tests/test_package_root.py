"""The package root reads as packages, a few leaves and the two CLIs; the Snakemake side is one
package, workflow/, above every other (nothing imports it but entry/ and the rules); config/
reaches nothing of the Snakemake side, neither workflow/ nor snakemake itself, directly or
through what it imports. Each check is shown to fail on a copy of the tree with an import
planted."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

from tests.support.import_graph import PACKAGE, import_graph, top_package

REPO = PACKAGE.parent
# The root's loose modules: leaves that import only each other, and the `python -m` CLIs.
ROOT_LEAVES = (
    "atomic",
    "exits",
    "paths",
    "redact",
    "registry_fetch",
    "terminal",
    "text",
    "venv",
    "vocabulary",
)
CLIS = {"plan": "workflow_scripts.config.plan", "compare": "workflow_scripts.outputs.compare_runs"}
WORKFLOW_MODULES = ("dag", "fidelity_steps", "hooks", "job_functions", "rule_jobs")


def importers_of_the_workflow_side(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a workflow/ module from outside workflow/ and entry/."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if top_package(module) not in ("workflow", "entry")
        for target in targets
        if top_package(target) == "workflow"
    )


def snakemake_imports(path: Path) -> set[str]:
    """The modules of snakemake a file imports, at any depth of its code."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return {name for name in names if name.split(".")[0] == "snakemake"}


def module_file(module: str, root: Path) -> Path:
    base = root / module.replace(".", "/")
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"


def snakemake_side_under_config(graph: dict[str, set[str]], package: Path = PACKAGE) -> list[str]:
    """The imports by which config/ reaches the Snakemake side, directly or through the modules
    it imports: a module of workflow/, or snakemake (`graph`: the import graph of `package`)."""
    reached: set[str] = set()
    todo = [module for module in graph if top_package(module) == "config"]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo += graph[module]
    found = []
    for module in sorted(reached):
        found += [f"{module} -> {t}" for t in sorted(graph[module]) if top_package(t) == "workflow"]
        used = snakemake_imports(module_file(module, package.parent))
        found += [f"{module} -> {name}" for name in sorted(used)]
    return found


def planted_copy(tmp_path: Path, file: str, line: str) -> Path:
    """A copy of the real tree with `line` planted in a function at the end of `file`."""
    copy = tmp_path / PACKAGE.name
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / file
    target.write_text(target.read_text() + f"\n\ndef _planted():\n    {line}\n")
    return copy


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_root_holds_packages_a_few_leaves_and_the_clis(graph):
    """Loose at the root: the leaves, which import only each other, and the CLIs, each
    forwarding to one module of a package. The Snakemake side is no longer among them."""
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert modules == sorted([*ROOT_LEAVES, *CLIS])
    for leaf in ROOT_LEAVES:
        assert {top_package(t) for t in graph[f"workflow_scripts.{leaf}"]} <= set(ROOT_LEAVES)
    for cli, home in CLIS.items():
        assert graph[f"workflow_scripts.{cli}"] == {home}


def test_the_snakemake_side_is_one_package_above_every_other(graph):
    """workflow/ holds the DAG, its fidelity part, the rules' job functions and the hooks; no
    module outside it and entry/ imports it, and the rules import it alone of the package."""
    home = PACKAGE / "workflow"
    assert sorted(p.stem for p in home.glob("*.py") if p.stem != "__init__") == sorted(
        WORKFLOW_MODULES
    )
    assert importers_of_the_workflow_side(graph) == []
    text = "\n".join(p.read_text() for p in [REPO / "Snakefile", *(REPO / "rules").glob("*.smk")])
    imported = re.findall(r"^\s*(?:from|import) (workflow_scripts[\w.]*)", text, re.M)
    assert imported == ["workflow_scripts.workflow.hooks"]


def test_config_reaches_nothing_of_the_snakemake_side(graph):
    """config/ hands the rules' resources over as plain functions (workflow/ makes them job
    functions): nothing it imports, at any depth, imports snakemake or workflow/."""
    assert snakemake_side_under_config(graph) == []


def test_an_import_of_the_workflow_side_from_below_is_found(tmp_path):
    copy = planted_copy(tmp_path, "outputs/labels.py", "from ..workflow.dag import build_dag")
    assert importers_of_the_workflow_side(import_graph(copy)) == [
        "workflow_scripts.outputs.labels -> workflow_scripts.workflow.dag"
    ]


@pytest.mark.parametrize(
    ("file", "line", "found"),
    [
        (
            "config/resources.py",
            "from ..workflow.job_functions import job_function",
            "workflow_scripts.config.resources -> workflow_scripts.workflow.job_functions",
        ),
        # through a leaf config/secrets.py imports
        ("redact.py", "import snakemake.io", "workflow_scripts.redact -> snakemake.io"),
    ],
    ids=["workflow-from-config", "snakemake-through-a-leaf"],
)
def test_a_planted_reach_of_config_into_the_snakemake_side_is_found(tmp_path, file, line, found):
    copy = planted_copy(tmp_path, file, line)
    assert found in snakemake_side_under_config(import_graph(copy), copy)
