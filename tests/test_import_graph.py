"""The package's import graph has no cycle, counting imports inside functions too (a cycle
dodged by a function-level import is still a cycle), and the shared vocabulary is a leaf."""

from __future__ import annotations

from tests.support.import_graph import cycles, import_graph


def test_the_walk_sees_relative_and_function_level_imports():
    graph = import_graph()
    assert "workflow_scripts.engines.base" in graph["workflow_scripts.engines.llamacpp"]
    assert len(graph) > 60


def test_the_package_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_vocabulary_is_a_leaf():
    assert import_graph()["workflow_scripts.vocabulary"] == set()


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
