"""A sweep series' verdicts as one family in the tables: the drafter's gain and its outputs'
verdict at each point Holm-adjusted over the series' points, the point's own p-value beside;
the crossover drawn from the adjusted verdicts; the series' outputs pooled over its points
(spec_gain_sweep, spec_crossover, the series' card in sweeps.md, the front page); fidelity.csv's
sweep rows likewise. Hand-made metrics and records whose p-values are computed here."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.outputs.test_sweeps import LOADS, done_series, front_page, outputs_under
from tests.support.config import default_config
from tests.support.sweeps import spread
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.fidelity.agreement import CHANGED, UNCHANGED, fisher_lower_p
from workflow_scripts.fidelity.pairs import FidelitySettings, floor_id
from workflow_scripts.loadgen.records import OK, RequestRecord
from workflow_scripts.outputs import sweeps
from workflow_scripts.outputs.changes import FASTER, NO_DIFFERENCE, repeat_changes
from workflow_scripts.outputs.fidelity.card import card_fidelity, fidelity_section
from workflow_scripts.outputs.fidelity.compared import drafter_output_verdicts
from workflow_scripts.outputs.fidelity.family import write_family
from workflow_scripts.outputs.fidelity.table import fidelity_table, fidelity_view
from workflow_scripts.outputs.spec_gain import spec_gain_table
from workflow_scripts.outputs.sweeps.files import write_sweeps
from workflow_scripts.verdicts.families import holm
from workflow_scripts.workflow.dag import build_dag

FAMILY = "Holm over 4 points of the series at 5 %"
REPO = Path(__file__).resolve().parents[2]
SIX = set(range(26, 32))


def gains_of(draft_decode: list[float]):
    tpot = [20.0] * len(LOADS)
    base, base_m = done_series(False, [10.0] * 4, tpot)
    draft, draft_m = done_series(True, draft_decode, tpot)
    return sweeps.sweep_tables(base_m + draft_m, base + draft, {}), base_m + draft_m


def test_a_point_faster_on_its_own_only_does_not_move_the_crossover():
    """Three tight repeats a point: +50 % at c1 (p = 3e-05), +3.5 % at c2 (p = 0.026, faster
    alone), none at c4 and c8. As one of 4 points c2's Holm p-value is 3 x 0.026 = 0.077: no
    detectable difference, so the drafter pays up to c1, not up to c2."""
    tables, metrics = gains_of([15.0, 10.35, 10.0, 10.0])
    gains = tables.spec_gain_sweep
    own = [repeat_changes(spread(10.0), spread(d), "decode_tok_s").p_value for d in (15, 10.35)]
    assert list(gains["p_value"][:2]) == pytest.approx(own)
    assert own[1] == pytest.approx(0.02556, abs=1e-4)
    assert list(gains["p_adjusted"]) == pytest.approx(holm(list(gains["p_value"])))
    assert gains["p_adjusted"].iloc[1] == pytest.approx(3 * own[1])
    assert list(gains["verdict_unadjusted"]) == [FASTER, FASTER, NO_DIFFERENCE, NO_DIFFERENCE]
    assert list(gains["verdict"]) == [FASTER, NO_DIFFERENCE, NO_DIFFERENCE, NO_DIFFERENCE]
    assert set(gains["family"]) == {FAMILY}
    row = tables.spec_crossover.iloc[0]
    assert (row["last_faster"], row["first_not_faster"]) == (1, 2)
    assert row["summary"] == (
        "faster up to c1, not from c2; c2 faster on its own (p = 0.026, Holm p = 0.077), not as "
        "one of the series' points"
    )
    assert row["family"] == FAMILY
    # spec_gain.csv, which holds every drafter cell, judges the series' points the same way
    whole = spec_gain_table(metrics).set_index("drafter_cell")
    assert list(whole["verdict"]) == list(gains["verdict"])
    assert list(whole["p_adjusted"]) == pytest.approx(list(gains["p_adjusted"]))


def test_a_series_faster_nowhere_as_a_family_reads_never_faster():
    tables, _ = gains_of([10.35, 10.3, 10.0, 10.0])  # p = 0.026 and 0.038 alone
    row = tables.spec_crossover.iloc[0]
    assert row["summary"] == (
        "never faster; c1 faster on its own (p = 0.026, Holm p = 0.1) and c2 faster on its own "
        "(p = 0.038, Holm p = 0.11), not as one of the series' points"
    )
    assert row["last_faster"] is None and row["first_not_faster"] == 1


def test_acceptance_outside_its_interval_at_one_point_alone_is_not_flagged_as_a_family():
    """Acceptance 0.484 at c4 against 0.500 at the other points, each over 4000 drafted tokens:
    0.500 lies just outside c4's Wilson interval (p = 0.04 alone), but as one of 4 points its
    Holm p-value is 4 times that: not flagged, and its note says why. At 0.30 it is flagged."""
    for rate, flagged in ((0.484, False), (0.30, True)):
        tpot = [20.0] * 4
        base, base_m = done_series(False, [10.0] * 4, tpot)
        draft, draft_m = done_series(True, [15.0] * 4, tpot)
        for m, r in zip(draft_m, [0.5, 0.5, rate, 0.5], strict=True):
            m["spec"] = {"acceptance_rate": r, "draft_tokens": 4000, "accepted_tokens": 4000 * r}
        gains = sweeps.sweep_tables(base_m + draft_m, base + draft, {}).spec_gain_sweep
        c4 = gains.iloc[2]
        assert not c4["acceptance_rate_lo"] <= 0.5 <= c4["acceptance_rate_hi"]  # outside alone
        assert c4["acceptance_p_value"] < 0.05
        assert c4["acceptance_p_adjusted"] == pytest.approx(min(1.0, 4 * c4["acceptance_p_value"]))
        assert list(gains["acceptance_differs"]) == [False, False, flagged, False]
        assert ("not as one of the series' points" in c4["acceptance_note"]) is not flagged
    assert c4["acceptance_p_value"] < 1e-10


# --- the outputs: each point as one of the series', and pooled -------------------------------

N = 32


def answers(differ: set[int]) -> list[RequestRecord]:
    """32 completed measured answers, those in `differ` with a changed last character."""
    return [
        RequestRecord(
            index=i,
            prompt_index=i,
            status=OK,
            sent_s=0.1 * i,
            ttft_s=0.01,
            e2e_s=0.05,
            prompt_tokens=5,
            completion_tokens=10,
            output=f"answer number {i}" + ("#" if i in differ else "."),
        )
        for i in range(N)
    ]


def h200_series(tmp_path):
    """The H200's lossless drafter: at each point the floor agrees on 26 of 32; the drafter
    on 26 of 32 at c1, c2 and c4 and on 18 of 32 at c8."""
    base, base_m = done_series(False, [10.0] * 4, [20.0] * 4)
    draft, draft_m = done_series(True, [15.0] * 4, [20.0] * 4)
    records = {}
    for b, d, differ in zip(base, draft, (6, 6, 6, 14), strict=True):
        records[b.id] = answers(set())
        records[floor_id(b.id)] = answers(set(range(6)))
        records[d.id] = answers(set(range(N - differ, N)))
    out = outputs_under(tmp_path)
    floors_m = [{"cell": floor_id(b.id), "status": "done"} for b in base]  # read for status only
    write_sweeps(base_m + draft_m + floors_m, base + draft, records, {}, out)
    return out, draft


def rows(path) -> list[dict]:
    return list(csv.DictReader(path.read_text().splitlines()))


def test_a_lossless_drafter_below_its_floor_at_one_point_alone_reads_unchanged(tmp_path):
    out, draft = h200_series(tmp_path)
    alone = fisher_lower_p(18, N, 26, N)  # 0.029
    gains = rows(out["spec_gain_sweep_csv"])
    assert [g["outputs"] for g in gains] == [UNCHANGED] * 4
    assert [g["outputs_unadjusted"] for g in gains] == [UNCHANGED] * 3 + [CHANGED]
    assert float(gains[3]["outputs_p_value"]) == pytest.approx(alone)
    assert float(gains[3]["outputs_p_adjusted"]) == pytest.approx(4 * alone)
    assert {g["outputs_pooled"] for g in gains} == {UNCHANGED}
    assert not any("outputs changed" in g["flags"] for g in gains)
    (crossover,) = rows(out["spec_crossover_csv"])
    assert crossover["outputs_verdict"] == UNCHANGED
    assert float(crossover["outputs_p_value"]) == pytest.approx(0.1443, abs=1e-4)
    note = (
        "below the floor on its own at c8 (p = 0.029, Holm p = 0.12), not as one of the series' "
        "points"
    )
    assert crossover["outputs"] == (
        f"unchanged at every point; pooled over the points: unchanged (p = 0.14); {note}"
    )
    assert crossover["outputs_note"].startswith("96/128 identical vs floor 104/128 over 4 points")
    # the series' card in sweeps.md and the front page say the same
    assert (
        f"Its greedy outputs against its base's: {crossover['outputs']}"
        in out["sweeps_md"].read_text()
    )
    html = front_page([out["spec_crossover_csv"]])
    row = re.search(r"<tr><td>[^<]*__ngram__sweep</td>(.*?)</tr>", html).group(1)
    assert "pooled over the points: unchanged (p = 0.14)" in row and "c8 (p = 0.029" in row
    md = out["spec_gain_sweep_md"].read_text()
    assert "0.029 (Holm 0.12)" in md and "Holm's step-down at 5 %" in md


def test_fidelity_csv_judges_a_sweep_series_points_as_a_family():
    """The default config's n-gram sweep (c1 .. c8 against the base series, each base point
    with its floor run), the H200's agreements: the c8 row keeps its own verdict and p-value
    beside the family's; the plain drafter cell outside the sweep is judged alone."""
    config = validate_config(default_config())
    cells = build_cells(config)
    series = "smollm2-135m__llamacpp-cpu__q4_0__ngram__sweep"
    records, metrics = {}, []
    for c, differ in zip((1, 2, 4, 8), (6, 6, 6, 14), strict=True):
        base = f"smollm2-135m__llamacpp-cpu__q4_0__none__sweep-c{c}"
        drafter = f"{series}-c{c}"
        records[base] = [r.to_dict() for r in answers(set())]
        records[floor_id(base)] = [r.to_dict() for r in answers(set(range(6)))]
        records[drafter] = [r.to_dict() for r in answers(set(range(N - differ, N)))]
        metrics += [{"cell": cell, "status": "done"} for cell in (base, floor_id(base), drafter)]
    plain, plain_base = (
        "smollm2-135m__llamacpp-cpu__q4_0__ngram__c4",
        ("smollm2-135m__llamacpp-cpu__q4_0__none__c4"),
    )
    records[plain], records[plain_base] = (
        [r.to_dict() for r in answers(set(range(14)))],
        [r.to_dict() for r in answers(set())],
    )
    metrics += [{"cell": plain, "status": "done"}, {"cell": plain_base, "status": "done"}]
    settings = FidelitySettings.of_config(config)
    table = fidelity_table(cells, metrics, records, {}, settings).set_index("cell")
    c8 = table.loc[f"{series}-c8"]
    alone = fisher_lower_p(18, N, 26, N)
    assert (c8["verdict"], c8["verdict_unadjusted"]) == (UNCHANGED, CHANGED)
    assert c8["p_value"] == pytest.approx(alone) and c8["p_adjusted"] == pytest.approx(4 * alone)
    assert c8["family"] == FAMILY and c8["series"] == series
    assert c8["series_verdict"] == UNCHANGED
    assert c8["series_p_value"] == pytest.approx(0.1443, abs=1e-4)
    assert "not as one of 4 points (Holm p = 0.12)" in c8["verdict_reason"]
    assert "below the floor on its own at c8" in c8["series_note"]
    lone = table.loc[plain]  # 18 of 32 against no floor: unresolved, alone
    assert lone["family"] == "alone at 5 %" and pd.isna(lone["series_verdict"])
    shown = fidelity_view(table.reset_index()).set_index("cell")
    assert shown.loc[f"{series}-c8", "p (Holm)"] == "0.029 (Holm 0.12)"
    assert shown.loc[f"{series}-c8", "series (pooled)"] == "unchanged (p = 0.14)"
    assert shown.loc[plain, "series (pooled)"] == ""  # outside a series
    verdicts = drafter_output_verdicts(cells, records, metrics)
    assert [verdicts[f"{series}-c{c}"] for c in (1, 2, 4, 8)] == [UNCHANGED] * 4


# --- a sweep point's card ---------------------------------------------------------------------


def write_cell(root: Path, metrics_path: str, records: list[RequestRecord]) -> Path:
    path = root / metrics_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cell": path.parent.name, "status": "done"}))
    (path.parent / "requests.jsonl").write_text(
        "".join(json.dumps(r.to_dict()) + "\n" for r in records)
    )
    return path


def test_a_sweep_points_card_judges_it_as_one_of_its_series(tmp_path, empty_workdir):
    """The default config's n-gram sweep: its series' family file is judged once from every
    point's files (their metrics.json, their base's and its floor's), and the card of its c8
    point reads its own verdict there: with the H200's agreements, `unchanged` as one of 4
    points with the series' pooled verdict, and no "not a free one" note; a card takes one
    family file, not every other point's three (edges growing with the square of the points)."""
    dag = build_dag(yaml.safe_load((REPO / "config.yaml").read_text()))
    steps = dag.fidelity_steps
    series = "smollm2-135m__llamacpp-cpu__q4_0__ngram__sweep"
    own = f"{series}-c8"
    inputs = steps.card_fidelity(own)
    settings = json.loads(steps.card_fidelity_settings(own))
    family_file = f"results/fidelity/families/{series}.json"
    assert inputs["fidelity_family"] == family_file and settings["point"] == own
    assert steps.family_targets() == [family_file]
    assert not any(key.startswith("family_") for key in inputs)
    members = json.loads(steps.family_settings(series))
    assert [m["label"] for m in members] == ["c1", "c2", "c4", "c8"]
    point_files = steps.family_inputs(series)
    assert point_files["point_0"] == f"results/cells/{series}-c1/metrics.json"
    assert point_files["point_0_reference"].endswith("__none__sweep-c1/metrics.json")
    assert point_files["point_0_floor"].endswith("__none__sweep-c1__floor/metrics.json")
    assert len(point_files) == 12  # 4 points x (cell, reference, floor)
    base = f"{series.replace('ngram', 'none')}-c8"
    assert "point" not in json.loads(steps.card_fidelity_settings(base))  # a reference point
    assert "fidelity_family" not in steps.card_fidelity(base)
    c8 = set(range(N - 14, N))  # 18 of 32 identical; the other points and the floors 26 of 32
    written = {
        key: write_cell(
            tmp_path,
            path,
            answers(set() if key.endswith("reference") else c8 if key == "point_3" else SIX),
        )
        for key, path in point_files.items()
    }
    paths = {k: str(v) for k, v in written.items()}
    family_path = tmp_path / family_file
    write_family(series, members, paths, family_path)
    mine = [r.to_dict() for r in answers(c8)]
    reference, floor = written["point_3_reference"], written["point_3_floor"]
    card = card_fidelity(mine, settings, reference, floor, None, family=family_path)
    assert card.judged.verdict == UNCHANGED and not card.outputs_changed
    assert card.judged.p_value == pytest.approx(fisher_lower_p(18, N, 26, N))
    assert "not as one of 4 points (Holm p = 0.12)" in card.judged.reason
    assert card.series.verdict == UNCHANGED and card.series.family == FAMILY
    assert card.series.series == series
    rows = {row[0]: row for row in fidelity_section(card).rows}
    assert rows["Its series, pooled"][1] == "unchanged (p = 0.14)"
    assert "below the floor on its own at c8" in rows["Its series, pooled"][2]
    # alone (no family file) the same point reads `changed`, the speed-up not free
    alone = card_fidelity(mine, settings, reference, floor)
    assert alone.judged.verdict == CHANGED and alone.outputs_changed
    # a point that did not finish is left out of the family, as fidelity.csv leaves it out
    written["point_0"].write_text(json.dumps({"status": "failed"}))
    write_family(series, members, paths, family_path)
    three = card_fidelity(mine, settings, reference, floor, None, family=family_path)
    assert three.series.family == "Holm over 3 points of the series at 5 %"
    assert [p.label for p in three.series.points] == ["c2", "c4", "c8"]
