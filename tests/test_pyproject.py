"""pyproject.toml: the documented CLIs are console scripts beside `llmbench-load`, each the same
function `python -m workflow_scripts.<cli>` runs; every runtime dependency is one the code
imports (or a named library needs)."""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# A distribution's import name where the two differ.
IMPORT_NAMES = {"pyyaml": "yaml"}
# Dependencies nothing imports by name, and who needs them.
USED_INDIRECTLY = {"tabulate": "pandas.DataFrame.to_markdown (the .md tables)"}


def resolve(target: str):
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


@pytest.mark.parametrize(
    ("script", "cli"), [("llmbench-plan", "plan"), ("llmbench-compare", "compare")]
)
def test_each_documented_cli_is_a_console_script_of_the_same_function(script, cli, capsys):
    scripts = PROJECT["scripts"]
    assert "llmbench-load" in scripts
    assert script in scripts, f"{script} missing from [project.scripts]"
    main = resolve(scripts[script])
    assert main is importlib.import_module(f"workflow_scripts.{cli}").main
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")


def imported_top_modules() -> set[str]:
    names = set()
    for path in (REPO / "workflow_scripts").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def test_every_runtime_dependency_is_imported_or_named_as_needed():
    imported = imported_top_modules()
    unused = []
    for requirement in PROJECT["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
        module = IMPORT_NAMES.get(name, name.replace("-", "_"))
        if module not in imported and name not in USED_INDIRECTLY:
            unused.append(requirement)
    assert unused == [], "a runtime dependency no module of workflow_scripts imports"
