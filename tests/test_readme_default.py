"""The README's account of the default run holds to the default config: the cell count its
"One real run" paragraph states is the count `config.yaml` plans (workflow/dag.py), so a cell
added to or dropped from the default cannot leave the README's figures describing another run."""

from __future__ import annotations

import re

import yaml

from tests.support.config import REPO
from workflow_scripts.workflow.dag import build_dag

README = REPO / "README.md"
MARK = "**One real run.**"


def one_real_run() -> str:
    """The README's paragraph that starts with MARK, up to its first blank line."""
    text = README.read_text()
    assert MARK in text, f"README.md has no {MARK} paragraph"
    return text[text.index(MARK) :].split("\n\n", 1)[0]


def stated(paragraph: str, what: str) -> int:
    """The one count the paragraph gives of `what` (`25 cells`), as a number."""
    counts = {int(n) for n in re.findall(rf"\b(\d+) {what}\b", " ".join(paragraph.split()))}
    assert len(counts) == 1, f"the README's {MARK} paragraph states {counts or 'no'} {what}"
    return counts.pop()


def test_the_readme_states_as_many_cells_and_searches_as_the_default_config_plans():
    dag = build_dag(yaml.safe_load((REPO / "config.yaml").read_text()))
    paragraph = one_real_run()
    assert stated(paragraph, "cells") == len(dag.cells)
    assert stated(paragraph, "latency-goal searches") == len(dag.searches)
