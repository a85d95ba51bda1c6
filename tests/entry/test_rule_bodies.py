"""One shape of rule body: the `script:` of rule `<rule>` is `workflow_scripts/entry/<rule>.py`,
every entry file is a rule's body, and no module under outputs/ or cell/ sees the Snakemake
object (the entry reads it and hands plain values on)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENTRY = REPO / "workflow_scripts" / "entry"
RULE = re.compile(r"^(?:rule|checkpoint) (\w+):", re.M)
SCRIPT = re.compile(r"^    script:\n\s+\"([^\"]+)\"", re.M)
SHELL_RULE = "series_server"  # a service job: a `shell:` that execs its entry module


def rule_bodies(text: str) -> dict[str, str | None]:
    """Each rule of a .smk text -> its `script:` path (None: no script, a shell rule)."""
    bodies = {}
    starts = list(RULE.finditer(text))
    ends = [after.start() for after in starts[1:]] + [len(text)] if starts else []
    for here, end in zip(starts, ends, strict=True):
        block = text[here.start() : end]
        script = SCRIPT.search(block)
        bodies[here.group(1)] = script.group(1) if script else None
    return bodies


def all_rule_bodies() -> dict[str, str | None]:
    bodies: dict[str, str | None] = {}
    for smk in sorted((REPO / "rules").glob("*.smk")):
        bodies |= rule_bodies(smk.read_text())
    return bodies


def test_the_parser_finds_rules_checkpoints_and_their_scripts():
    text = (
        'rule a:\n    output:\n        "x",\n    script:\n        "../e/a.py"\n\n\n'
        'checkpoint b:\n    shell:\n        "true"\n'
    )
    assert rule_bodies(text) == {"a": "../e/a.py", "b": None}


def test_every_script_is_entry_slash_its_rule_name():
    bodies = all_rule_bodies()
    assert {"cell", "card", "aggregate", "html_report", "summary_plots"} <= set(bodies)
    wrong = {
        rule: script
        for rule, script in bodies.items()
        if script is not None and script != f"../workflow_scripts/entry/{rule}.py"
    }
    assert wrong == {}, "a rule whose script is not entry/<rule>.py"
    for rule, script in bodies.items():
        if script is not None:
            assert (REPO / "rules" / script).resolve() == ENTRY / f"{rule}.py", rule
            assert (ENTRY / f"{rule}.py").is_file(), rule


def test_the_one_shell_rule_runs_the_entry_module_named_after_it():
    assert [rule for rule, script in all_rule_bodies().items() if script is None] == [SHELL_RULE]
    cells = (REPO / "rules" / "cells.smk").read_text()
    assert f"workflow_scripts.entry.{SHELL_RULE} " in cells


def test_every_entry_file_is_the_body_of_a_rule():
    rules = set(all_rule_bodies())
    entries = {path.stem for path in ENTRY.glob("*.py") if path.stem != "__init__"}
    assert entries - rules == set(), "an entry file that no rule runs"


def test_each_entry_reads_the_snakemake_object_and_logs_its_stderr():
    for rule, script in all_rule_bodies().items():
        if script is None:
            continue
        text = (ENTRY / f"{rule}.py").read_text()
        assert "sm = snakemake" in text, rule
        assert "with stderr_to_log(sm.log[0]):" in text, rule


def test_no_module_below_entry_sees_the_snakemake_object():
    """Neither a `*_from_snakemake` function nor a parameter `sm` (the name the rule object
    went by) in outputs/ or cell/: their functions take plain values."""
    seen = []
    for package in ("outputs", "cell"):
        for path in sorted((REPO / "workflow_scripts" / package).rglob("*.py")):
            text = path.read_text()
            for pattern in (r"_from_snakemake\b", r"\(sm\b", r"\bsm\.(input|output|params)\b"):
                if re.search(pattern, text):
                    seen.append(f"{path.relative_to(REPO)}: {pattern}")
    assert seen == []
