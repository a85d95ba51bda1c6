"""A disturbed cell (other work on the machine during its bench: metrics.json
`interference.flagged`, process.machine_use.disturbed) is flagged wherever its figures are
shown: summary, sweeps, the frontier, the gain at each point, the crossover (its text names the
point the answer rests on), spec_gain and comparisons, the latency-goal search's answer and
slo_drafter, the fidelity frontier and its answer. Hand-written metrics; the issue's case: the
base series' c8 ran while another process used 107 % of a core, and the crossover said "faster
at c8" without a word."""

from __future__ import annotations

import copy
import csv
import json
from dataclasses import replace
from pathlib import Path

from tests.outputs.test_fidelity_tables import F16, Q4, Q8, records
from tests.outputs.test_sweeps import done_series, outputs_under
from tests.slo.test_tables import GOAL, SPEC, probe, searched
from tests.support.config import default_config
from tests.support.outputs import BASE, fixture_metrics
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.fidelity.pairs import FidelitySettings, floor_id
from workflow_scripts.outputs import cell_pairs, sweeps
from workflow_scripts.outputs.changes import FASTER
from workflow_scripts.outputs.fidelity.frontier import frontier_points, frontier_table
from workflow_scripts.outputs.fidelity.table import fidelity_table
from workflow_scripts.outputs.front_page import answers_html
from workflow_scripts.outputs.repeats import collapse_repeats
from workflow_scripts.outputs.search.outcome import search_outcome
from workflow_scripts.outputs.search.tables import drafter_goal_rows, slo_row, write_slo_tables
from workflow_scripts.outputs.spec_gain import spec_gain_table
from workflow_scripts.outputs.sweeps.files import write_sweeps
from workflow_scripts.outputs.tables import summary_frame, summary_rows
from workflow_scripts.process import machine_use as mu

LOADS = [1, 2, 4, 8]
SLO_OUT = ("slo_csv", "slo_md", "slo_drafter_csv", "slo_drafter_md")


def busy(other_cpu_pct: float = 107.0) -> dict:
    """The interference of a 10 s bench in which other work used `other_cpu_pct` % of a core."""
    start = mu.UseSnapshot(0.0, 0.0, (), ())
    return mu.interference(start, mu.UseSnapshot(10.0, other_cpu_pct / 10.0, (), ()))


def issue_series():
    """The issue's sweep: the drafter is faster only at c8, where the base point was disturbed
    (its decode tok/s fell); every other point quiet."""
    tpot = [20.0] * len(LOADS)
    base, base_m = done_series(False, [10, 10, 10, 10], tpot, LOADS)
    draft, draft_m = done_series(True, [10, 10, 10, 15], tpot, LOADS)
    for m in base_m + draft_m:
        m["interference"] = busy(3.0)
    base_m[3]["interference"] = busy(107.0)
    return base + draft, base_m + draft_m


def test_one_definition_of_disturbed():
    assert mu.disturbed({"interference": busy(107.0)}) is True
    assert mu.disturbed({"interference": busy(3.0)}) is False
    # a client that limited the bench is flagged apart: not a disturbance
    assert mu.disturbed({"interference": busy(3.0), "client": {"limited": True}}) is False
    assert mu.disturbed({"status": "failed"}) is None
    assert mu.disturbed_flag({"A": {"interference": busy()}, "B": {}}) == "disturbed: A"


def test_a_disturbed_point_is_flagged_in_sweeps_frontier_gain_and_crossover(tmp_path):
    cells, metrics = issue_series()
    tables = sweeps.sweep_tables(metrics, cells, {})
    shaky = tables.sweeps.set_index("cell")["disturbed"].to_dict()
    assert shaky[cells[3].id] is True
    assert [shaky[c.id] for c in cells if c.id != cells[3].id] == [False] * 7
    # the frontier: every point on it says whether it rests on a disturbed cell
    assert "disturbed" in tables.pareto.columns
    on = zip(tables.pareto["cell"], tables.pareto["disturbed"], strict=True)
    assert all(shaky[cell] == d for cell, d in on)
    gains = tables.spec_gain_sweep.set_index("point")
    assert gains.loc["c8", "verdict"] == FASTER
    assert gains.loc["c8", "flags"].endswith("disturbed: base cell")
    assert bool(gains.loc["c8", "disturbed"]) is True
    assert not any("disturbed" in f for f in gains.loc[["c1", "c2", "c4"], "flags"])
    (row,) = tables.spec_crossover.to_dict("records")
    assert row["rests_on_disturbed"] == "c8"
    assert row["summary"].startswith("faster at c8, not at c1, c2 and c4")  # the issue's answer
    assert "c8 rests on a disturbed measurement" in row["summary"]
    # the files say it too: sweeps.md's sections and column, the crossover's markdown
    out = outputs_under(tmp_path)
    write_sweeps(metrics, cells, {}, {}, out)
    crossover = list(csv.DictReader(Path(out["spec_crossover_csv"]).read_text().splitlines()))
    assert crossover[0]["rests_on_disturbed"] == "c8"
    assert "c8 rests on a disturbed measurement" in Path(out["spec_crossover_md"]).read_text()
    sweeps_md = Path(out["sweeps_md"]).read_text()
    assert "Disturbed (other work on the machine during the bench): c8" in sweeps_md
    assert "disturbed" in next(csv.reader(Path(out["pareto_csv"]).read_text().splitlines()))


def test_a_crossover_on_quiet_points_rests_on_nothing():
    cells, metrics = issue_series()
    metrics[3]["interference"] = busy(3.0)
    (row,) = sweeps.sweep_tables(metrics, cells, {}).spec_crossover.to_dict("records")
    assert row["rests_on_disturbed"] == "" and "disturbed" not in row["summary"]


def test_summary_spec_gain_and_comparisons_flag_a_disturbed_cell(tmp_path):
    metrics = list(fixture_metrics(tmp_path).values())
    for m in metrics:
        if m.get("interference"):
            m["interference"] = busy(3.0)
    base = next(m for m in metrics if m["cell"] == BASE)
    base["interference"] = busy(107.0)
    base[mu.DISTURBED_ATTEMPTS] = [{"attempt": 1, "interference": busy(90.0)}]
    rows = {r["cell"]: r for r in summary_rows(metrics)}
    assert rows[BASE]["disturbed"] is True
    assert "measured 2 times, disturbed each time" in rows[BASE]["interference_note"]
    frame = summary_frame(list(rows.values())).set_index("cell")
    assert bool(frame.loc[BASE, "disturbed"]) is True
    gain = spec_gain_table(metrics).set_index("base_cell").loc[BASE]
    assert "disturbed: base cell" in gain["flags"] and bool(gain["disturbed"]) is True
    other = copy.deepcopy(base) | {"quant": "q8_0", "cell": BASE.replace("q4_0", "q8_0")}
    other["interference"] = busy(3.0)
    table = cell_pairs.comparisons_table([base, other])
    assert len(table) and table["disturbed"].all()
    assert all(f.startswith("disturbed: A") for f in table["flags"])


def test_a_flag_in_any_repeat_stays_and_the_cell_is_disturbed():
    cells, metrics = issue_series()
    quiet, shaky = copy.deepcopy(metrics[0]), copy.deepcopy(metrics[0])
    shaky["cell"] = quiet["cell"] + "__r2"
    shaky["interference"] = busy(107.0)
    folded, _, _ = collapse_repeats([quiet, shaky])
    assert mu.disturbed(folded[0]) is True
    assert folded[0]["interference"][mu.FLAGGED_IN_RUN] == shaky["cell"]


# --- the latency-goal search's answer and the fidelity frontier -----------------------------


def test_a_disturbed_probe_is_named_where_the_search_answers(tmp_path):
    """The search 1..64 under TPOT = 10 + 4c walks c1, c2, c4, c8, c16, c12, c10, c11; c8 ran
    disturbed: slo.csv/md's note and `rests_on_disturbed` name it, as spec_crossover names a
    point, and slo_drafter flags the pair. A disturbed probe off the walk shapes no answer."""
    base = replace(searched(10, 4), disturbed=frozenset({(8, 0), (6, 0)}))
    row = slo_row(base)
    assert (row["largest_passing"], row["smallest_failing"]) == (10, 11)
    assert row["rests_on_disturbed"] == "c8"
    assert row["note"] == ("largest passing c10, smallest failing c11" + mu.disturbed_note(["c8"]))
    assert "c8 rests on a disturbed measurement" in row["note"]
    assert slo_row(searched(10, 4))["rests_on_disturbed"] == ""
    drafter = replace(searched(8, 4, drafter="ngram"), disturbed=frozenset({(16, 0), (12, 0)}))
    (pair,) = drafter_goal_rows([base, drafter])
    assert pair["flags"] == "disturbed: base series at c8 and drafter series at c16, c12"
    assert pair["disturbed"] is True
    (quiet,) = drafter_goal_rows([searched(10, 4), searched(8, 4, drafter="ngram")])
    assert quiet["disturbed"] is False and "disturbed" not in quiet["flags"]
    out = {key: tmp_path / key.replace("_csv", ".csv").replace("_md", ".md") for key in SLO_OUT}
    write_slo_tables([base, drafter], out)
    assert "c8 rests on a disturbed measurement" in out["slo_md"].read_text()
    assert "disturbed: base series at c8" in out["slo_drafter_md"].read_text()
    front = "\n".join(answers_html([str(out["slo_csv"])]))  # the report's front page
    assert "rests_on_disturbed" in front and "<td>c8</td>" in front


def test_the_search_reads_which_probes_were_disturbed_from_their_metrics(tmp_path):
    search = searched(10, 4)
    record = {
        "series": search.series,
        "model": "m",
        "engine": "llamacpp",
        "quant": "q4",
        "drafter": "none",
        "workload": "w",
        "slo": GOAL.to_dict(),
        "search": SPEC.to_dict(),
    }
    for load, other_cpu in ((1, 3.0), (2, 3.0), (4, 107.0)):
        folder = tmp_path / f"{search.series}-c{load}"
        folder.mkdir()
        records, metrics = probe(10 + 4 * load)
        metrics |= {"cell": folder.name, "status": "done", "interference": busy(other_cpu)}
        (folder / "metrics.json").write_text(json.dumps(metrics))
        lines = "".join(json.dumps(r.to_dict()) + "\n" for r in records)
        (folder / "requests.jsonl").write_text(lines)
    found = search_outcome(record, tmp_path)
    assert set(found.results) == {(1, 0), (2, 0), (4, 0)}
    assert found.disturbed == {(4, 0)}
    assert slo_row(found)["rests_on_disturbed"] == "c4"


def test_the_fidelity_frontier_flags_a_disturbed_quant_and_the_answer_resting_on_it():
    """q8_0 and q4_0 both pass the goal; q4_0, the faster, ran disturbed: its row says so, and
    the answer (q4_0, chosen over q8_0 by a speed measured while other work ran) names it."""
    config = validate_config(default_config())
    cells = build_cells(config)
    recs = {F16: records(set()), floor_id(F16): records(set()), Q8: records(set())}
    recs[Q4] = records(set())
    metrics = [
        {"cell": cell, "status": "done", "decode_tok_s": speed, "interference": busy(3.0)}
        for cell, speed in ((F16, 50.0), (Q8, 70.0), (Q4, 100.0))
    ]
    metrics[2]["interference"] = busy(107.0)
    kld = {
        "smollm2-135m__q8_0": {"kld_mean": 0.01, "kld_mean_err": 0.001, "same_top_pct": 97.0},
        "smollm2-135m__q4_0": {"kld_mean": 0.02, "kld_mean_err": 0.001, "same_top_pct": 96.0},
    }
    table = fidelity_table(cells, metrics, recs, kld, FidelitySettings.of_config(config))
    by_id = {m["cell"]: m for m in metrics}
    frontier = frontier_table(frontier_points(table, by_id, {c.id: c for c in cells}))
    rows = frontier.set_index("quant")
    assert rows["disturbed"].to_dict() == {"f16": False, "q8_0": False, "q4_0": True}
    assert rows.loc["q4_0", "answer"] == "fastest within the goal" + mu.disturbed_note(["q4_0"])
    by_id[Q4]["interference"] = busy(3.0)
    quiet = frontier_table(frontier_points(table, by_id, {c.id: c for c in cells}))
    assert set(quiet["answer"]) == {"", "fastest within the goal"}
    assert not quiet["disturbed"].any()
