"""The maps stay current: every package's docstring names each of its modules and sub-packages
(in backticks), and docs/code.md's package table names each module in its package's row."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.import_graph import PACKAGE

CODE_MAP = PACKAGE.parent / "docs" / "code.md"


def parts_of(package: Path) -> list[str]:
    """A package's modules and sub-packages, by name (`__main__` included, `__init__` not)."""
    modules = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    subpackages = [p.name for p in package.iterdir() if (p / "__init__.py").is_file()]
    return sorted(modules + subpackages)


def named(name: str, text: str) -> bool:
    """`name`, `name.py` or `name/` in backticks."""
    return re.search(rf"`{re.escape(name)}(\.py|/)?`", text) is not None


def unnamed_in_docstrings(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Package folder (relative to `root`'s parent) -> the parts its docstring leaves out."""
    out = {}
    for init in sorted(root.rglob("__init__.py")):
        if "__pycache__" in init.parts:
            continue
        docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
        missing = [name for name in parts_of(init.parent) if not named(name, docstring)]
        if missing:
            out[str(init.parent.relative_to(root.parent))] = missing
    return out


def test_every_package_docstring_names_its_modules():
    assert unnamed_in_docstrings() == {}


def test_a_module_added_without_a_word_is_caught(tmp_path):
    """A stand-in package, not the real tree: one module named in the docstring, one not."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text('"""Holds `said`."""\n')
    (package / "said.py").write_text("")
    (package / "unsaid.py").write_text("")
    assert unnamed_in_docstrings(package) == {"pkg": ["unsaid"]}


def test_the_code_map_names_every_module_in_its_package_row():
    rows = dict(re.findall(r"^\| `(\w+)/` \| (.*) \|$", CODE_MAP.read_text(), re.M))
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert sorted(rows) == packages
    missing = {}
    for name in packages:
        if name == "entry":  # one module per rule, named after it: the row says so once
            continue
        package = PACKAGE / name
        parts = parts_of(package) + [
            q.stem
            for sub in package.iterdir()
            if (sub / "__init__.py").is_file()
            for q in sub.glob("*.py")
            if q.stem != "__init__"
        ]
        if unsaid := sorted({part for part in parts if not named(part, rows[name])}):
            missing[name] = unsaid
    assert missing == {}


README = PACKAGE.parent / "README.md"


def readme_code_map() -> str:
    """The README's map of workflow_scripts/: the code block under "Where the code lives"."""
    text = README.read_text()
    section = text[text.index("## Where the code lives") :]
    return section[section.index("```\n") + 4 : section.index("\n```", section.index("```\n") + 4)]


def test_the_readme_code_map_names_every_package_and_leaf():
    """Each package of workflow_scripts/ heads a line of the README's map (`name/`), and each
    module at the root is named in it (`name.py`)."""
    block = readme_code_map()
    heads = set(re.findall(r"^(\w+)/ ", block, re.M))
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages - heads == set()
    leaves = {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert {leaf for leaf in leaves if leaf not in block} == set()
