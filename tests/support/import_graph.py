"""The import graph of a package, counting imports inside functions too (a cycle dodged by a
function-level import is still a cycle), per module and per top package, and its cycles."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "workflow_scripts"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str, root: Path) -> bool:
    base = root / dotted.replace(".", "/")
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path, package: Path = PACKAGE) -> set[str]:
    """Every module of `package` that `path` imports, at any depth of its code: `from X import
    y` is an import of X.y when that is a module, else of X; relative imports resolved."""
    root = package.parent
    name = module_name(path, root)
    parent = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parent.split(".")[: len(parent.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [
                f"{source}.{alias.name}" if is_module(f"{source}.{alias.name}", root) else source
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and not is_module(target, root):
                target = target.rpartition(".")[0]
            if target.split(".")[0] == package.name and target != name:
                found.add(target)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports."""
    root = package.parent
    return {module_name(p, root): imports_of(p, package) for p in sorted(package.rglob("*.py"))}


def top_package(module: str) -> str:
    """`workflow_scripts.cell.run` -> `cell`; a top-level module is its own package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """Top package -> the other top packages its modules import (the layering a reader sees)."""
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        mine = top_package(module)
        packages.setdefault(mine, set()).update(
            top_package(t) for t in targets if top_package(t) != mine
        )
    return packages


def edges_between(graph: Mapping[str, set[str]], a: str, b: str) -> list[str]:
    """The module imports that make package `a` depend on package `b`, to print with a cycle."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if top_package(module) == a
        for target in targets
        if top_package(target) == b
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component bigger than a module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found
