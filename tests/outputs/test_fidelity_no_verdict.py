"""No verdict from what is not there: a pair whose reference or floor run did not finish, and
answers that errored or came back empty, give no verdict, and fidelity.csv/md and the card say
the same (one judgement, fidelity.judgement). The cells' folders (metrics.json, requests.jsonl)
are hand-made stand-ins for a run's, so every expected figure is known by construction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.config import default_config
from workflow_scripts.atomic import write_json, write_text
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.fidelity.pairs import FidelitySettings, floor_id
from workflow_scripts.loadgen.records import RequestRecord
from workflow_scripts.outputs.fidelity.card import card_fidelity, fidelity_section
from workflow_scripts.outputs.fidelity.compared import drafter_output_verdicts
from workflow_scripts.outputs.fidelity.table import fidelity_table, fidelity_view

SMOL = "smollm2-135m__llamacpp-cpu"
F16, Q4 = (f"{SMOL}__{q}__none__c4" for q in ("f16", "q4_0"))
NGRAM = f"{SMOL}__q4_0__ngram__c4"
FLOOR = floor_id(F16)
N = 16
GOAL = {"agreement_of_floor_pct": {"min": 90}}
SERVER_EXITED = "RuntimeError: the server exited with status 1 while loading"


def answer(i: int, changed: bool = False) -> str:
    return f"answer {i} " + ("#changed" if changed else "as the reference says")


def records(texts: dict[int, str | None]) -> list[dict]:
    """One measured request per prompt: `ok` with its text, or `error` where the text is None."""
    out = []
    for i, text in texts.items():
        status = "error" if text is None else "ok"
        out.append(RequestRecord(i, i, status=status, output=text or "").to_dict())
    return out


def answers(changed: set[int] = frozenset(), upto: int = N) -> dict[int, str | None]:
    """Prompts 0..N-1: those below `upto` answered (`changed` ones differ), the rest errored."""
    return {i: answer(i, i in changed) if i < upto else None for i in range(N)}


FAILED = {"status": "failed", "reason": f"{SERVER_EXITED}\nlast lines of its log"}
# The quant changes 5 of 16 answers (31 %), all past the 10 the failed reference answered.
SCENARIOS = {
    "reference failed": (
        {Q4: answers({11, 12, 13, 14, 15}), F16: answers(upto=10), FLOOR: answers()},
        {F16: FAILED},
        ("no verdict", f"reference failed: {SERVER_EXITED}"),
        "not measured",
    ),
    "floor run failed": (
        {Q4: answers({11, 12, 13, 14, 15}), F16: answers(), FLOOR: answers(upto=8)},
        {FLOOR: FAILED},
        ("no verdict", f"floor run failed: {SERVER_EXITED}"),
        "not measured",
    ),
    "all answers empty": (
        {c: dict.fromkeys(range(N), "") for c in (Q4, F16, FLOOR)},
        {},
        ("no verdict", "no evidence (32 of 32 answers empty or errored)"),
        "not measured",
    ),
    "errored or empty": (
        {
            Q4: {i: None if i < 8 else "" for i in range(N)},
            F16: dict.fromkeys(range(N), ""),
            FLOOR: answers(),
        },
        {},
        ("no verdict", "no evidence (32 of 32 answers empty or errored)"),
        "not measured",
    ),
    "every run finished": (
        {Q4: answers({11, 12, 13, 14, 15}), F16: answers(), FLOOR: answers()},
        {},
        ("changed", "11/16 identical vs floor 16/16: below the floor (Fisher p = 0.022)"),
        "fail",
    ),
}


# fidelity.md's `prompts`: none compared without the reference, all with a failed floor run
# (the agreement is shown, the verdict withheld), none where no answer is evidence.
PROMPTS_SHOWN = {
    "reference failed": "",
    "floor run failed": str(N),
    "all answers empty": "0",
    "errored or empty": "0",
    "every run finished": str(N),
}


def cell_folder(results: Path, cell: str, recs: list[dict], metrics: dict) -> Path:
    folder = results / "cells" / cell
    write_text(folder / "requests.jsonl", "".join(json.dumps(r) + "\n" for r in recs))
    write_json(folder / "metrics.json", {"cell": cell, "status": "done", **metrics})
    return folder / "metrics.json"


@pytest.fixture(scope="module")
def cells():
    return build_cells(validate_config(default_config()))


def judged(scenario: str, cells, tmp_path: Path):
    """The quant's row in fidelity.csv, its view in fidelity.md and its card's fidelity data."""
    texts, statuses, _, _ = SCENARIOS[scenario]
    recs = {cell: records(t) for cell, t in texts.items()}
    metrics = {cell: {"cell": cell, "status": "done", **statuses.get(cell, {})} for cell in recs}
    paths = {cell: cell_folder(tmp_path, cell, recs[cell], metrics[cell]) for cell in recs}
    settings = FidelitySettings({"smollm2-135m": "f16"}, {"smollm2-135m": GOAL})
    table = fidelity_table(cells, list(metrics.values()), recs, {}, settings)
    card = card_fidelity(
        recs[Q4],
        {"kind": "quant", "reference_cell": F16, "goal": GOAL},
        reference=paths[F16],
        floor=paths[FLOOR],
    )
    return table.set_index("cell").loc[Q4], fidelity_view(table).set_index("cell").loc[Q4], card


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_table_gives_no_verdict_where_a_run_did_not_finish_or_no_answer_is_evidence(
    scenario, cells, tmp_path
):
    """fidelity.csv/md: before, a failed reference's pair had no row at all, a failed floor run
    read as none measured, and empty answers as identical (`unchanged`, the goal `pass`)."""
    _, _, (verdict, reason), goal_verdict = SCENARIOS[scenario]
    row, shown, _ = judged(scenario, cells, tmp_path)
    assert (row["verdict"], row["verdict_reason"]) == (verdict, reason)
    assert row["goal_verdict"] == goal_verdict
    assert shown["verdict"] == (f"no verdict: {reason}" if verdict == "no verdict" else verdict)
    assert shown["prompts"] == PROMPTS_SHOWN[scenario]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_card_gives_the_tables_judgement(scenario, cells, tmp_path):
    """The card judges as the table does (one function): before, it judged a failed
    reference's or floor run's partial records and said `unchanged` for a quant that changes
    31 % of its answers."""
    _, _, (verdict, reason), goal_verdict = SCENARIOS[scenario]
    row, _, card = judged(scenario, cells, tmp_path)
    assert (card.judged.verdict, card.judged.reason) == (verdict, reason)
    goal_line = f"Fidelity goal (agreement % of floor ≥ 90): {goal_verdict}. "
    assert card.goal_lines == (goal_line + row["goal_detail"],)
    assert ("Verdict", verdict, reason) in fidelity_section(card).rows
    assert card.outputs_changed is (verdict == "changed")


def test_a_drafter_whose_base_failed_is_flagged_no_verdict(cells):
    """spec_gain and spec_gain_sweep show the same judgement beside the drafter's gain."""
    recs = {NGRAM: records(answers({0, 1, 2, 3, 4, 5})), Q4: records(answers(upto=4))}
    metrics = [{"cell": NGRAM, "status": "done"}, {"cell": Q4, **FAILED}]
    assert drafter_output_verdicts(cells, recs, metrics) == {NGRAM: "no verdict"}
    metrics[1] = {"cell": Q4, "status": "done"}  # finished: judged (no floor run here)
    recs[Q4] = records(answers())
    assert drafter_output_verdicts(cells, recs, metrics) == {NGRAM: "unresolved"}


def test_a_failed_cells_own_card_gives_no_verdict(cells, tmp_path):
    """The cell's own partial records are no evidence either."""
    reference = cell_folder(tmp_path, F16, records(answers()), {})
    failed = {"cell": Q4, **FAILED}
    card = card_fidelity(
        records(answers(upto=3)),
        {"kind": "quant", "reference_cell": F16, "goal": None},
        reference=reference,
        metrics=failed,
    )
    assert (card.judged.verdict, card.judged.reason) == (
        "no verdict",
        f"this cell failed: {SERVER_EXITED}",
    )
