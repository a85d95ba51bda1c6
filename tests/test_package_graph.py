"""The packages of workflow_scripts depend one way: counted per top package (cell, engines,
process, ...) with function-level imports included, their graph has no cycle. A module-level
graph can be acyclic while two packages still import each other through different modules;
this is the layering a reader sees, and the check prints the imports that close a cycle."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from tests.support.import_graph import PACKAGE, cycles, edges_between, import_graph, package_graph


def cycle_report(package: Path = PACKAGE) -> str:
    """Each package cycle with the module imports that make it, empty when there is none."""
    graph = import_graph(package)
    packages = package_graph(graph)
    lines = []
    for members in cycles(packages):
        lines.append("package cycle: " + " <-> ".join(members))
        for a in members:
            for b in members:
                if b in packages.get(a, ()):
                    lines += [f"    {edge}" for edge in edges_between(graph, a, b)]
    return "\n".join(lines)


def test_the_packages_depend_one_way():
    report = cycle_report()
    assert report == "", f"\n{report}"


def test_the_process_layer_imports_no_package_above_it():
    """process/ is below engines/ and cell/: both start servers through it."""
    packages = package_graph(import_graph())
    assert {"engines", "cell", "loadgen", "outputs", "config"}.isdisjoint(packages["process"])
    assert "process" in packages["engines"] and "process" in packages["cell"]


def test_the_energy_layer_sits_below_cell_and_outputs_beside_process():
    """energy/ reads the hardware's counters and turns them into a cell's figures: it imports
    the load client's request record and nothing above it (cell/, outputs/, config/,
    engines/); process/ does not import it either (the memory sampler is handed an energy
    source, `process.memory.EnergyProbe`), so the two sit side by side."""
    graph = import_graph()
    packages = package_graph(graph)
    assert packages["energy"] <= {"loadgen", "vocabulary", "atomic"}
    assert "workflow_scripts.loadgen.records" in graph["workflow_scripts.energy.windows"]
    assert "energy" not in packages["process"]
    for below in ("loadgen", "engines", "config", "slo", "fidelity", "weights"):
        assert "energy" not in packages[below], below


def test_a_planted_cycle_through_a_function_level_import_is_found_and_printed(tmp_path):
    """A copy of the real tree, with one import inside a function of process/server.py reaching
    up into cell/: the check must fail and name that import."""
    copy = tmp_path / PACKAGE.name
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert cycle_report(copy) == ""
    server = copy / "process" / "server.py"
    server.write_text(
        server.read_text() + "\n\ndef _planted():\n    from ..cell.run import run_cell\n"
    )
    report = cycle_report(copy)
    assert "package cycle:" in report
    assert "cell" in report and "process" in report
    assert "workflow_scripts.process.server -> workflow_scripts.cell.run" in report


def test_the_latency_goal_core_sits_below_config_and_outputs():
    """slo/ judges a point from its records and plans the search (`slo.search`): config's
    reading of the search and the outputs' files and tables build on it, and it reaches up into
    neither (nor into cell/, engines/)."""
    graph = import_graph()
    packages = package_graph(graph)
    assert packages["slo"] <= {"vocabulary", "loadgen", "verdicts"}
    assert "slo" in packages["config"] and "slo" in packages["outputs"]
    assert "workflow_scripts.slo.search" in graph["workflow_scripts.config.search"]


def test_what_latency_and_fidelity_goals_both_judge_with_is_one_package_below_them():
    """verdicts/ holds the bounds and intervals, the verdict words and families of verdicts
    that slo/, fidelity/ and outputs/ all judge with: it imports only the load client's
    percentile (one definition), each of them imports it, and none of its modules is left in
    slo/ or at the package root."""
    graph = import_graph()
    packages = package_graph(graph)
    home = PACKAGE / "verdicts"
    assert sorted(p.stem for p in home.glob("*.py")) == [
        "__init__",
        "bounds",
        "families",
        "verdict",
    ]
    assert packages["verdicts"] <= {"loadgen"}
    assert graph["workflow_scripts.verdicts.bounds"] == {"workflow_scripts.loadgen.metrics"}
    for above in ("slo", "fidelity", "outputs"):
        assert "verdicts" in packages[above], above
    assert not (PACKAGE / "families.py").exists()
    assert not (PACKAGE / "slo" / "bounds.py").exists()
    assert not (PACKAGE / "slo" / "verdict.py").exists()


def test_the_kl_steps_are_planned_apart_from_running_the_tool():
    """fidelity/kld_plan.py is what the DAG, the config checks and the tables know of the KL
    divergence steps, parse time (no subprocess, nothing of cell/); fidelity/kld.py runs
    llama-perplexity, and only the rules' bodies import it."""
    graph = import_graph()
    runners = {m for m, imports in graph.items() if "workflow_scripts.fidelity.kld" in imports}
    assert runners == {
        "workflow_scripts.entry.fidelity_base",
        "workflow_scripts.entry.fidelity_kld",
        "workflow_scripts.entry.fidelity_text",
    }
    assert "workflow_scripts.fidelity.kld_plan" in graph["workflow_scripts.fidelity.kld"]
    plan = PACKAGE / "fidelity" / "kld_plan.py"
    stdlib = {
        node.module
        for node in ast.walk(ast.parse(plan.read_text()))
        if isinstance(node, ast.ImportFrom) and not node.level
    } | {
        alias.name
        for node in ast.walk(ast.parse(plan.read_text()))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert stdlib <= {"__future__", "math", "collections.abc", "dataclasses", "typing"}, stdlib
    assert not any(".cell." in m for m in graph["workflow_scripts.fidelity.kld_plan"])


def check_feature_package(name: str, modules: tuple[str, ...], gone: tuple[str, ...], lines: int):
    """outputs/<name>/ holds exactly `modules`, each named in its docstring and none over
    `lines` lines, and none of `gone` (paths under outputs/) is left."""
    home = PACKAGE / "outputs" / name
    assert sorted(p.stem for p in home.glob("*.py")) == sorted([*modules, "__init__"])
    for path in gone:
        assert not (PACKAGE / "outputs" / path).exists(), path
    for path in home.glob("*.py"):
        assert len(path.read_text().splitlines()) <= lines, path
    docstring = (home / "__init__.py").read_text()
    assert all(f"`{module}`" in docstring for module in modules)


def importers(graph: dict[str, set[str]], module: str) -> set[str]:
    return {m for m, imports in graph.items() if module in imports}


SEARCH_PARSE_MODULES = ("goals", "judgement", "walk", "outcome")  # no pandas: the DAG's
SEARCH_MODULES = (*SEARCH_PARSE_MODULES, "tables", "figure", "cells", "text")


def test_the_searchs_outputs_are_one_sub_package_its_parse_time_part_apart():
    """outputs/search/ holds the latency-goal search's outputs and each cell's goal columns, one
    job a module, none over 450 lines, nothing of it left loose in outputs/; the part the DAG
    imports while the Snakefile is parsed and walked (goal files, judgements, the walk, the
    outcome) imports none of the part that writes tables and draws, and only the slo_tables
    rule imports the figure. (That the parse-time part pulls no pandas:
    tests/test_parse_imports.py.)"""
    gone = ("search_files", "slo_tables", "slo_cells", "slo_text", "slo_search")
    check_feature_package("search", SEARCH_MODULES, tuple(f"{g}.py" for g in gone), 450)
    graph = import_graph()
    search = "workflow_scripts.outputs.search"
    writing = {f"{search}.{name}" for name in ("tables", "figure", "cells", "text")}
    for name in SEARCH_PARSE_MODULES:
        assert not graph[f"{search}.{name}"] & writing, name
    assert importers(graph, f"{search}.figure") == {"workflow_scripts.entry.slo_tables"}


FIDELITY_OUTPUT_MODULES = ("compared", "table", "frontier", "plot", "card", "family", "files")


def test_fidelitys_outputs_are_one_sub_package_with_one_pareto_frontier():
    """outputs/fidelity/ holds what a run shows of output fidelity, one job a module, none over
    300 lines, nothing of it left loose in outputs/ or in the card package; its frontier is the
    sweeps' one Pareto frontier (no second copy); only the rule that draws imports matplotlib
    (fidelity/plot.py)."""
    gone = ("fidelity_tables.py", "fidelity_plot.py", "card/fidelity.py")
    check_feature_package("fidelity", FIDELITY_OUTPUT_MODULES, gone, 300)
    graph = import_graph()
    fidelity = "workflow_scripts.outputs.fidelity"
    assert "workflow_scripts.outputs.sweeps.frontier" in graph[f"{fidelity}.frontier"]
    assert "_dominated" not in (PACKAGE / "outputs" / "fidelity" / "frontier.py").read_text()
    assert importers(graph, f"{fidelity}.plot") == {f"{fidelity}.files"}


SWEEP_MODULES = ("points", "frontier", "gain", "crossover", "cards", "build", "files", "plots")


def test_the_sweeps_code_is_one_sub_package_with_its_intervals_in_stats():
    """outputs/sweeps/ holds every sweep module, split by job and none over 450 lines; its
    intervals come from outputs/stats.py and a point's name and typed load from vocabulary.py,
    beside SweepPoint (the search's planner reads the same); only the rule that draws imports
    matplotlib (sweeps/plots.py, and the energy frontier's figure that draws through it)."""
    gone = ("sweeps.py", "sweep_files.py", "plots_sweeps.py")
    check_feature_package("sweeps", SWEEP_MODULES, gone, 450)
    graph = import_graph()
    sweeps = "workflow_scripts.outputs.sweeps"
    assert "workflow_scripts.outputs.stats" in graph[f"{sweeps}.gain"]
    for name in ("points", "gain", "crossover"):
        assert "workflow_scripts.vocabulary" in graph[f"{sweeps}.{name}"], name
    assert "workflow_scripts.vocabulary" in graph["workflow_scripts.slo.search"]
    # the energy frontier's figure is drawn by the throughput frontier's one function, and
    # by the same rule: still only that rule imports matplotlib
    energy_plot = "workflow_scripts.outputs.energy.plot"
    assert importers(graph, f"{sweeps}.plots") == {f"{sweeps}.files", energy_plot}
    assert importers(graph, energy_plot) == {f"{sweeps}.files"}


SOURCE_MODULES = ("base", "registry", "sharegpt", "humaneval", "jsonl", "random_words", "trace")


def names_imported_from(module: str, roots: tuple[Path, ...]) -> dict[str, set[str]]:
    """Name -> the files that import it from `module` (absolute or relative imports)."""
    found: dict[str, set[str]] = {}
    for root in roots:
        for path in root.rglob("*.py"):
            where = path.relative_to(PACKAGE.parent).with_suffix("")
            package = ".".join(where.parts[:-1] if path.name != "__init__.py" else where.parts)
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                source = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                if source == module:
                    for alias in node.names:
                        found.setdefault(alias.name, set()).add(str(where))
    return found


def defined_in(path: Path) -> set[str]:
    """The names a module defines at its top level (functions, classes, assignments)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_the_workloads_code_is_one_module_a_job():
    """loadgen/: the prompt sources a sub-package, one module a dataset kind, registered by kind,
    beside what they share (`base`) and the registry; the prompts' records are imported from
    `prompts`, their home (nothing imports from `datasets` what it does not define); a trace is
    read and windowed in `traces` and filled with text in `trace_text`, config's plan-time
    checks importing the reader alone; JSON lines are parsed in one place, `sources/jsonl`."""
    graph = import_graph()
    home = PACKAGE / "loadgen" / "sources"
    assert sorted(p.stem for p in home.glob("*.py")) == sorted([*SOURCE_MODULES, "__init__"])
    for path in home.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 450, path
    roots = (PACKAGE, PACKAGE.parent / "tests", PACKAGE.parent / "benchmarks")
    datasets = PACKAGE / "loadgen" / "datasets.py"
    imported = names_imported_from("workflow_scripts.loadgen.datasets", roots)
    reexported = {name: sorted(files) for name, files in imported.items()}
    for name in defined_in(datasets):
        reexported.pop(name, None)
    assert reexported == {}
    loadgen = "workflow_scripts.loadgen"
    assert f"{loadgen}.traces" in graph["workflow_scripts.config.traces"]
    assert f"{loadgen}.trace_text" not in graph["workflow_scripts.config.traces"]
    assert graph[f"{loadgen}.traces"] == set()  # the reader stands alone: no text, no prompts
    assert f"{loadgen}.traces" in graph[f"{loadgen}.trace_text"]
    parsing = sorted(
        path.stem
        for path in home.glob("*.py")
        if any(
            isinstance(node, ast.Attribute) and node.attr == "loads"
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert parsing == ["jsonl"]
    assert f"{loadgen}.sources.jsonl" in graph[f"{loadgen}.sources.humaneval"]


def test_the_measured_run_and_the_cli_are_short_functions_without_closures():
    """loadgen/closed_loop.py: each piece of the measured run (a worker, the wait for a send
    time, one request) a function of its own, none defined inside another, the conversation
    replay in loadgen/sessions.py; the CLI's arguments built in groups. None over 60 lines."""
    loadgen = PACKAGE / "loadgen"
    lengths = {}
    for name in ("closed_loop", "sessions", "__main__"):
        tree = ast.parse((loadgen / f"{name}.py").read_text())
        functions = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        for function in functions:
            inner = [
                node.name
                for node in ast.walk(function)
                if node is not function and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            assert inner == [] or name == "__main__", (function.name, inner)
            lengths[f"{name}.{function.name}"] = function.end_lineno - function.lineno + 1
    assert {"closed_loop.measured", "closed_loop.worker", "sessions.converse"} <= set(lengths)
    assert {key: n for key, n in lengths.items() if n > 60} == {}


# loadgen.metrics' per-request definitions: a record's figure, computed once into its row
PER_REQUEST = {"tpot_s", "ttft_from_schedule_s", "e2el_from_schedule_s", "wait_s"}


def names_imported(path: Path, module: str) -> set[str]:
    """The names `path` imports from `module` (dotted), at any depth of its code."""
    package = list(path.relative_to(PACKAGE.parent).parts[:-1])  # where `.` points
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            if ".".join([*base, node.module or ""]) == module:
                found |= {alias.name for alias in node.names}
    return found


def test_the_outputs_and_the_latency_goal_read_per_request_figures_from_the_request_table():
    """A card's latency figure, its goal's judgement, its intervals and its stability check
    take each request's TTFT, TPOT and E2E from the one table built from its records
    (loadgen/request_table.py, which calls loadgen.metrics' definitions once per record): no
    module of outputs/ or slo/ imports a per-request definition to compute a figure again."""
    metrics = "workflow_scripts.loadgen.metrics"
    for folder in ("outputs", "slo"):
        for path in (PACKAGE / folder).rglob("*.py"):
            assert not names_imported(path, metrics) & PER_REQUEST, path
    table = PACKAGE / "loadgen" / "request_table.py"
    assert PER_REQUEST - {"wait_s"} <= names_imported(table, metrics)
    graph = import_graph()
    readers = importers(graph, "workflow_scripts.loadgen.request_table")
    for module in ("slo.point", "outputs.stats", "outputs.stability", "outputs.plots_cell"):
        assert f"workflow_scripts.{module}" in readers, module


def test_cells_are_typed_past_the_rules_params_and_identity_is_spelled_once():
    """A rule's `cells` / `cell` param becomes Cells in its body (entry/): no union of a cell and
    its dict is left below it. The columns that name a cell (vocabulary.IDENTITY_COLUMNS) are
    spelled in vocabulary.py alone: no other module lists all of them, as a table's columns
    (a module-level list) or as a row's keys (a dict)."""
    vocabulary = (PACKAGE / "vocabulary.py").read_text()
    assert "CellData" not in vocabulary and "def of(" not in vocabulary
    identity = {"model", "engine", "quant", "drafter", "workload"}
    for path in PACKAGE.rglob("*.py"):
        assert "CellData" not in path.read_text(), path
        if path.name == "vocabulary.py" and path.parent == PACKAGE:
            continue
        tree = ast.parse(path.read_text())
        lists = [
            node.value
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.List | ast.Tuple)
        ]
        rows = [node for node in ast.walk(tree) if isinstance(node, ast.Dict)]
        for found in [*(n.elts for n in lists), *(n.keys for n in rows)]:
            names = {e.value for e in found if isinstance(e, ast.Constant)}
            assert not identity <= names, (path, found[0].lineno)
