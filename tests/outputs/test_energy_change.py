"""The drafter's energy change per output token, on hand-made metrics.json `energy` objects
(tests/support/energy.py, through the record's own type) whose steady-state intervals have a
known relative error: the change, its interval, p-value and verdict in closed form; not measured
with the reason; the repeats' interval; a series' points as one Holm family; and where the drafter
stops saving energy (spec_crossover), the energy frontier over the sweep points, and the latency
goal's tables at the answer."""

from __future__ import annotations

import csv
import itertools
import math
from dataclasses import replace
from pathlib import Path

import pytest

from tests.outputs.test_sweeps import PNG_MAGIC, brute_frontier, done_series, outputs_under
from tests.slo.test_tables import searched
from tests.support.energy import NO_POWERCAP, measured_energy, unmeasured_energy
from tests.support.outputs import BASE, DRAFTER, fixture_metrics
from workflow_scripts.outputs import sweeps
from workflow_scripts.outputs.changes import NO_DIFFERENCE
from workflow_scripts.outputs.energy.change import (
    COSTS_MORE,
    ENERGY_KEYS,
    SAVES,
    energy_change,
)
from workflow_scripts.outputs.energy.crossover import energy_words
from workflow_scripts.outputs.search.tables import drafter_goal_rows, slo_row, write_slo_tables
from workflow_scripts.outputs.spec_gain import spec_gain_table
from workflow_scripts.outputs.stats import Z975
from workflow_scripts.outputs.sweeps.files import write_sweeps
from workflow_scripts.verdicts.families import judge_series
from workflow_scripts.vocabulary import ENERGY_NOT_MEASURED, Status

KWH = {"usd_per_kwh": 0.12}


def cell(energy: dict | None, **extra) -> dict:
    """A done cell's metrics record holding `energy` (None: a result from before energy)."""
    out = {"cell": "c", "status": Status.DONE, "decode_tok_s": 100.0, **extra}
    if energy is not None:
        out["energy"] = energy
    return out


def closed_form(b: float, d: float, se_b: float, se_d: float) -> tuple[float, float, float, float]:
    """change %, lo %, hi %, p: log ratio ± z √(se_b² + se_d²), p from the same normal."""
    se, center = math.hypot(se_b, se_d), math.log(d / b)
    lo, hi = (100 * (math.exp(center + s * Z975 * se) - 1) for s in (-1, 1))
    return 100 * (d / b - 1), lo, hi, math.erfc(abs(center) / se / math.sqrt(2))


@pytest.mark.parametrize(
    ("drafter_j", "expected"),
    [(0.40, SAVES), (0.60, COSTS_MORE), (0.505, NO_DIFFERENCE)],
)
def test_the_change_interval_p_value_and_verdict_are_the_closed_form(drafter_j, expected):
    base = cell(measured_energy(0.5, se=0.02, above_idle=0.25))
    drafter = cell(measured_energy(drafter_j, se=0.03, above_idle=0.30))
    found = energy_change(base, drafter)
    change, lo, hi, p = closed_form(0.5, drafter_j, 0.02, 0.03)
    assert (found.base_j, found.drafter_j) == (0.5, drafter_j)
    assert found.change_pct == pytest.approx(change, rel=1e-12)
    assert (found.lo_pct, found.hi_pct) == (
        pytest.approx(lo, rel=1e-9),
        pytest.approx(hi, rel=1e-9),
    )
    assert found.p_value == pytest.approx(p, rel=1e-9)
    assert found.verdict == expected
    assert (found.p_value < 0.05) == (expected != NO_DIFFERENCE)  # the test and the interval agree
    # above idle: the drafter's own work, 0.30 J against 0.25 J a token, whatever the gross
    assert found.above_idle_change_pct == pytest.approx(20.0)
    assert found.source == "steady-state time slices, 20 + 20"


def test_a_cell_not_measured_gives_not_measured_with_the_reason_never_a_figure():
    found = energy_change(cell(unmeasured_energy()), cell(measured_energy(0.4)))
    assert found.verdict == ENERGY_NOT_MEASURED
    assert found.note == f"base cell: rapl: {NO_POWERCAP}"
    assert (found.change_pct, found.lo_pct, found.p_value) == (None, None, None)
    old = energy_change(cell(measured_energy(0.5)), cell(None))
    assert old.verdict == ENERGY_NOT_MEASURED and "drafter cell: not recorded" in old.note
    # a pair whose cell did not finish has no energy verdict (its flags say why)
    assert energy_change(cell(measured_energy(0.5)), {"status": "failed"}).verdict is None


def test_without_a_steady_state_interval_there_is_a_change_and_no_verdict():
    found = energy_change(cell(measured_energy(0.5)), cell(measured_energy(0.6, se=None)))
    assert found.change_pct == pytest.approx(20.0)
    assert found.verdict is None and found.p_value is None
    assert found.source.startswith("no interval: drafter: 3 slice(s) of the steady state")


def test_both_cells_repeated_take_the_repeats_interval():
    def repeated(values):
        figures = [{"j_per_output_token": v} for v in values]
        return cell(
            measured_energy(sum(values) / 3, se=None),
            repeats={"runs": 3, "done": 3, "cells": ["a", "b", "c"], "figures": figures},
        )

    found = energy_change(repeated([0.49, 0.50, 0.51]), repeated([0.59, 0.60, 0.61]))
    assert found.source == "repeats, 3 + 3 runs"
    assert found.change_pct == pytest.approx(20.0)
    assert found.lo_pct > 0 and found.verdict == COSTS_MORE and found.p_value < 0.01


def test_a_series_points_are_one_holm_family():
    """Four points each at p ≈ 0.02 alone: Holm's adjusted p-values (4 × 0.02 = 0.08 for the
    smallest) keep every one from reading `saves` as one of the series' points."""
    se = math.log(0.95) / -2.326 / math.sqrt(2)  # |z| = 2.326 for a 5 % saving: p ≈ 0.02
    one = energy_change(cell(measured_energy(0.5, se=se)), cell(measured_energy(0.475, se=se)))
    rows = [one.columns() for _ in range(5)]
    assert all(r["energy_verdict"] == SAVES and 0.019 < r["energy_p_value"] < 0.021 for r in rows)
    rows, alone = rows[:4], rows[4:]
    judge_series(rows, ["s"] * 4, ENERGY_KEYS)
    assert [r["energy_verdict"] for r in rows] == [NO_DIFFERENCE] * 4
    assert [r["energy_verdict_unadjusted"] for r in rows] == [SAVES] * 4
    assert rows[0]["energy_p_adjusted"] == pytest.approx(4 * rows[0]["energy_p_value"])
    assert rows[0]["energy_family"] == "Holm over 4 points of the series at 5 %"
    judge_series(alone, [None], ENERGY_KEYS)
    assert alone[0]["energy_verdict"] == SAVES and alone[0]["energy_family"] == "alone at 5 %"


def test_spec_gain_gives_the_drafters_energy_change_beside_its_speed_gain(tmp_path):
    metrics = fixture_metrics(tmp_path)
    metrics[BASE]["energy"] = measured_energy(0.5, se=0.01)
    metrics[DRAFTER]["energy"] = measured_energy(0.6, se=0.01)
    row = spec_gain_table(list(metrics.values())).set_index("drafter_cell").loc[DRAFTER]
    assert row["energy_change_pct"] == pytest.approx(20.0)
    assert row["energy_verdict"] == COSTS_MORE
    assert row["energy_change_lo_pct"] > 0 and row["energy_family"] == "alone at 5 %"
    metrics[BASE]["energy"] = unmeasured_energy()
    row = spec_gain_table(list(metrics.values())).set_index("drafter_cell").loc[DRAFTER]
    assert row["energy_verdict"] == ENERGY_NOT_MEASURED
    assert row["energy_note"].startswith("base cell: rapl: no powercap folder")


# --- a sweep: each point's change, where the drafter stops saving, the energy frontier -------

BASE_J, DRAFT_J = [0.5, 0.4, 0.3, 0.25], [0.4, 0.35, 0.33, 0.3]


def energy_series(base_j=BASE_J, draft_j=DRAFT_J, se=0.01):
    """A base and a drafter series whose speed (as test_sweeps' crossover case) is faster at
    c1, c2 and not from c4, their points' energy as given (None: not measured)."""
    base, base_m = done_series(False, [10.0, 18.0, 30.0, 45.0], [20.0, 25.0, 40.0, 50.0])
    draft, draft_m = done_series(True, [15.0, 20.0, 28.0, 40.0], [15.0, 20.0, 42.0, 60.0])
    for metrics, values in ((base_m, base_j), (draft_m, draft_j)):
        for m, j in zip(metrics, values, strict=True):
            m["energy"] = unmeasured_energy() if j is None else measured_energy(j, se=se)
    return base + draft, base_m + draft_m


def test_each_sweep_point_has_its_energy_change_and_the_crossover_says_where_it_stops_saving():
    cells, metrics = energy_series()
    tables = sweeps.sweep_tables(metrics, cells, {})
    gains = tables.spec_gain_sweep
    expected = [100 * (d / b - 1) for b, d in zip(BASE_J, DRAFT_J, strict=True)]
    assert list(gains["energy_change_pct"]) == pytest.approx(expected)
    assert list(gains["energy_verdict"]) == [SAVES, SAVES, COSTS_MORE, COSTS_MORE]
    assert set(gains["energy_family"]) == {"Holm over 4 points of the series at 5 %"}
    (row,) = tables.spec_crossover.to_dict("records")
    assert (row["last_saves_energy"], row["first_not_saving_energy"]) == (2, 4)
    assert row["first_not_saving_energy_verdict"] == COSTS_MORE
    assert row["first_not_saving_energy_change_pct"] == pytest.approx(10.0)
    assert row["energy_summary"] == (
        "saves energy up to c2, not from c4, where it stops being faster too"
    )
    # the drafter saves at c1..c4 but is faster only at c1, c2: it stops being faster first
    cells, metrics = energy_series(draft_j=[0.4, 0.35, 0.27, 0.3])
    (row,) = sweeps.sweep_tables(metrics, cells, {}).spec_crossover.to_dict("records")
    assert (
        row["energy_summary"]
        == "saves energy up to c4, not from c8, after it stops being faster (c4)"
    )


def test_a_series_not_measured_places_no_crossover_and_says_not_measured_at_each_point():
    cells, metrics = energy_series([None] * 4, [None] * 4)
    tables = sweeps.sweep_tables(metrics, cells, {})
    assert set(tables.spec_gain_sweep["energy_verdict"]) == {ENERGY_NOT_MEASURED}
    (row,) = tables.spec_crossover.to_dict("records")
    assert row["energy_summary"] == "" and row["last_saves_energy"] is None
    assert tables.energy_frontier.empty


def test_every_pattern_of_energy_verdicts_reads_as_one_sentence():
    labels = ["c1", "c2", "c4", "c8"]
    for verdicts in itertools.product([SAVES, COSTS_MORE, NO_DIFFERENCE, None], repeat=4):
        rows = [
            {"point": p, "energy_verdict": v, "energy_change_pct": 1.0}
            for p, v in zip(labels, verdicts, strict=True)
        ]
        text = energy_words(rows)
        flags = [v == SAVES for v in verdicts if v]
        if not flags:
            assert text == "no energy verdict at any point"
        elif all(flags):
            assert text.startswith("saves energy at every point")
        elif not any(flags):
            assert text.startswith("never saves energy")
        elif flags == sorted(flags, reverse=True):
            assert text.startswith("saves energy up to"), text
        else:
            assert "no single crossover" in text, text
        assert ("; no energy verdict at" in text) == (None in verdicts and bool(flags))


def test_the_energy_frontier_is_the_non_dominated_points_and_the_rule_writes_it(tmp_path):
    cells, metrics = energy_series()
    prices = {c.id: KWH for c in cells}
    out = outputs_under(tmp_path)
    out["energy_frontier_plot"] = tmp_path / "energy_frontier.png"
    tables = write_sweeps(metrics, cells, {}, {}, out, prices)
    points = tables.sweeps
    xy = list(zip(points["interactivity_tok_s"], points["output_tokens_per_j"], strict=True))
    frontier = tables.energy_frontier
    assert sorted(frontier["cell"]) == sorted(points["cell"].iloc[brute_frontier(xy)])
    assert list(frontier["interactivity_tok_s"]) == sorted(frontier["interactivity_tok_s"])
    # dollars per million output tokens at each point: J/token × $/kWh ÷ 3.6e6 × 1e6
    assert list(points["usd_per_m_output_tokens"]) == pytest.approx(
        [j * 0.12 / 3.6 for j in BASE_J + DRAFT_J]
    )
    assert set(points["cost_basis"]) == {"usd_per_kwh"}
    rows = list(csv.DictReader(Path(out["energy_frontier_csv"]).read_text().splitlines()))
    assert [r["cell"] for r in rows] == list(frontier["cell"])
    assert Path(out["energy_frontier_plot"]).read_bytes()[:8] == PNG_MAGIC
    md = Path(out["spec_gain_sweep_md"]).read_text()
    assert "energy verdict" in md and "costs more" in md
    assert "saves energy up to c2" in Path(out["spec_crossover_md"]).read_text()


def test_with_nothing_measured_the_frontier_says_why_and_the_tables_show_no_energy(tmp_path):
    cells, metrics = energy_series([None] * 4, [None] * 4)
    out = outputs_under(tmp_path)
    out["energy_frontier_plot"] = tmp_path / "energy_frontier.png"
    write_sweeps(metrics, cells, {}, {}, out)
    md = Path(out["energy_frontier_md"]).read_text()
    assert f"No point to draw: energy: not measured on this machine: rapl: {NO_POWERCAP}" in md
    assert Path(out["energy_frontier_plot"]).read_bytes()[:8] == PNG_MAGIC
    for name in ("sweeps_md", "spec_gain_sweep_md", "spec_crossover_md"):
        text = Path(out[name]).read_text()
        assert "J/output token" not in text and "energy verdict" not in text, name
        assert "energy_summary" not in text and "$/M" not in text, name


# --- the latency goal's answer --------------------------------------------------------------


def with_energy(search, j_at=lambda load: 1.0 / load):
    """A search whose every probe was measured, J per output token `j_at(load)`."""
    return replace(
        search, energy={key: measured_energy(j_at(key[0]), se=0.01) for key in search.results}
    )


def test_the_goal_tables_give_what_a_token_costs_at_the_largest_passing_load(tmp_path):
    base = with_energy(searched(10, 4))  # passes up to c10
    row = slo_row(base, KWH)
    assert row["largest_passing"] == 10
    assert row["j_per_output_token"] == pytest.approx(0.1)
    assert row["output_tokens_per_j"] == pytest.approx(10.0)
    assert row["usd_per_m_output_tokens"] == pytest.approx(0.1 * 0.12 / 3.6)
    assert (row["cost_basis"], row["cost_price"]) == ("usd_per_kwh", 0.12)
    assert "board energy" in row["energy_note"]
    hourly = slo_row(base, {"usd_per_hour": 3.6})
    answer = base.at(10)
    assert hourly["usd_per_m_output_tokens"] == pytest.approx(
        1e6 / (answer.decode_tok_s * 3600) * 3.6
    )
    unpriced = slo_row(base)
    assert unpriced["usd_per_m_output_tokens"] is None and unpriced["cost_basis"] is None
    drafter = with_energy(searched(8, 4, drafter="ngram"), lambda load: 0.15)  # passes to c11
    (pair,) = drafter_goal_rows([base, drafter])
    assert (pair["base_j_per_output_token"], pair["drafter_j_per_output_token"]) == (
        pytest.approx(0.1),
        pytest.approx(0.15),
    )
    assert pair["energy_change_pct"] == pytest.approx(50.0)
    assert pair["energy_verdict"] == COSTS_MORE
    names = ("slo_csv", "slo_md", "slo_drafter_csv", "slo_drafter_md")
    out = {key: tmp_path / key.replace("_csv", ".csv").replace("_md", ".md") for key in names}
    write_slo_tables([base, drafter], out, {base.series: KWH, drafter.series: KWH})
    md = out["slo_md"].read_text()
    assert "j_per_output_token" in md and "usd_per_m_output_tokens" in md
    write_slo_tables([searched(10, 4)], out)  # nothing measured, nothing priced
    assert "j_per_output_token" not in out["slo_md"].read_text()
