"""What a token costs, where it shows, on hand-made metrics.json `energy` objects
(tests/support/energy.py, through the record's own type): summary.csv/md's columns and the
not-measured line, dollars per million output tokens on each basis (closed form; no price, no
dollar column), energy.csv/md one row per cell, a cell's repeats, the card's Energy section, the
front page's "What a token costs" and the table a run ends with."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from tests.outputs.test_run_end import done, lines_of
from tests.support.energy import (
    NO_POWERCAP,
    NO_PYNVML,
    measured_energy,
    unmeasured_energy,
)
from tests.support.outputs import BASE, BASE_C4, DRAFTER, FAILED, fixture_cells, fixture_metrics
from tests.support.run_end_table import table_rows
from workflow_scripts.outputs.card import build_card, render_markdown
from workflow_scripts.outputs.compact import compact_view, summary_row
from workflow_scripts.outputs.energy.cost import cost_of
from workflow_scripts.outputs.energy.front import token_cost_html
from workflow_scripts.outputs.energy.table import energy_table, write_energy
from workflow_scripts.outputs.energy.view import not_measured_lines, scope_words
from workflow_scripts.outputs.repeats import collapse_repeats
from workflow_scripts.outputs.tables import summary_frame, summary_rows
from workflow_scripts.outputs.writers import summary_intro
from workflow_scripts.vocabulary import ENERGY_NVML, ENERGY_RAPL

HOURLY, KWH = {"usd_per_hour": 3.6}, {"usd_per_kwh": 0.12}
RAPL_REASON = f"rapl: {NO_POWERCAP}"


def with_energy(tmp_path, **energies) -> list[dict]:
    """The output fixtures' metrics (a base, a drafter, the base at c4, a failed and a blocked
    cell), each done cell's `energy` the one given by its id (the rest not measured)."""
    metrics = fixture_metrics(tmp_path)
    for cell_id, m in metrics.items():
        if m.get("status") == "done":
            m["energy"] = energies.get(cell_id, unmeasured_energy())
    return list(metrics.values())


# --- dollars per million output tokens ----------------------------------------------------------


def test_each_basis_gives_dollars_per_million_output_tokens_in_closed_form():
    # $3.6 an hour at 100 output tok/s: 360,000 tokens an hour, $10 a million
    assert cost_of(HOURLY, 100.0, None).usd_per_m_output_tokens == pytest.approx(10.0)
    assert cost_of(HOURLY, 100.0, None).basis == "usd_per_hour"  # no energy needed
    # 0.5 J a token at $0.12/kWh: 5e5 J a million, 0.1389 kWh, $0.01667
    found = cost_of(KWH, 100.0, 0.5)
    assert found.usd_per_m_output_tokens == pytest.approx(0.5e6 / 3.6e6 * 0.12)
    assert (found.basis, found.price) == ("usd_per_kwh", 0.12)
    unread = cost_of(KWH, 100.0, None)
    assert unread.usd_per_m_output_tokens is None and unread.note == "energy not measured"
    assert cost_of(None, 100.0, 0.5).columns() == {
        "usd_per_m_output_tokens": None,
        "cost_basis": None,
        "cost_price": None,
    }


# --- summary.csv and summary.md ---------------------------------------------------------------


def test_the_summary_has_energy_columns_and_dollars_only_where_priced(tmp_path):
    metrics = with_energy(tmp_path, **{BASE: measured_energy(0.25), DRAFTER: measured_energy(0.3)})
    prices = {BASE: KWH, DRAFTER: HOURLY}
    rows = {r["cell"]: r for r in summary_rows(metrics, fixture_cells(), prices=prices)}
    base = rows[BASE]
    assert (base["energy_status"], base["energy_source"]) == ("measured", ENERGY_NVML)
    assert base["j_per_output_token"] == 0.25 and base["output_tokens_per_j"] == 4.0
    assert base["energy_note"] == "board energy: a lower bound on the machine's"
    assert base["usd_per_m_output_tokens"] == pytest.approx(0.25e6 / 3.6e6 * 0.12)
    decode = next(m for m in metrics if m["cell"] == DRAFTER)["decode_tok_s"]
    assert rows[DRAFTER]["usd_per_m_output_tokens"] == pytest.approx(3.6e6 / (decode * 3600))
    unread = rows[BASE_C4]
    assert unread["energy_status"] == "not measured" and unread["j_per_output_token"] is None
    assert unread["energy_note"] == f"not measured: {RAPL_REASON}"
    assert rows[FAILED]["energy_status"] is None and rows[FAILED]["energy_note"] == ""
    frame = summary_frame(list(rows.values()), fixture_cells())
    assert list(frame.columns[-3:]) == ["usd_per_m_output_tokens", "cost_basis", "cost_price"]
    headers, _ = compact_view(list(rows.values()))
    assert headers[-3:] == ["j_per_output_token", "usd_per_m_output_tokens", "reason"]
    # unpriced: the CSV keeps its columns empty, the compact view leaves the dollars out
    bare = summary_rows(metrics, fixture_cells())
    assert all(r["usd_per_m_output_tokens"] is None for r in bare)
    assert "usd_per_m_output_tokens" not in compact_view(bare)[0]


def test_a_machine_with_neither_counter_says_not_measured_once_in_the_summary(tmp_path):
    metrics = with_energy(tmp_path)
    rows = summary_rows(metrics, fixture_cells())
    headers, _ = compact_view(rows)
    assert "j_per_output_token" not in headers and "usd_per_m_output_tokens" not in headers
    intro = summary_intro(metrics, rows)
    assert intro.count("not measured") == 1
    assert f"- Energy: not measured on this machine: {RAPL_REASON}" in intro
    # cells that say different things: each reason with its cells
    next(m for m in metrics if m["cell"] == BASE)["energy"] = unmeasured_energy(
        (ENERGY_NVML, NO_PYNVML)
    )
    lines = not_measured_lines(summary_rows(metrics, fixture_cells()))
    assert lines[0] == f"energy of {BASE}: not measured: nvml: {NO_PYNVML}"
    assert len(lines) == 2 and lines[1].endswith(RAPL_REASON)


def test_the_scope_says_board_energy_or_the_whole_socket_and_the_clients_share():
    assert scope_words(measured_energy(0.1)) == "board energy: a lower bound on the machine's"
    rapl = measured_energy(0.1, source=ENERGY_RAPL, client_share_pct=12.4)
    assert scope_words(rapl) == (
        "package counter: the whole socket, the client included: its CPU share 12 %"
    )


# --- energy.csv and energy.md -------------------------------------------------------------------


def test_the_energy_table_has_a_row_per_cell_with_its_figures_or_why_not(tmp_path):
    energy = measured_energy(0.25, output_tokens=400, window_s=8.0, se=0.02, disturbed=True)
    metrics = with_energy(tmp_path, **{BASE: energy})
    table = energy_table(metrics, {BASE: KWH}).set_index("cell")
    assert list(table.index) == [m["cell"] for m in metrics]
    base = table.loc[BASE]
    assert (base["energy_status"], base["source"], base["method"]) == (
        "measured",
        "nvml",
        "counter",
    )
    assert base["devices"] == "GPU 0 (H200)" and base["window_s"] == 8.0
    assert base["joules"] == pytest.approx(100.0) and base["j_per_output_token"] == 0.25
    assert base["idle_w"] == pytest.approx((100.0 - 0.125 * 400) / 8.0)
    assert base["steady_slices"] == 20 and base["steady_j_per_output_token_lo"] < 0.25
    assert "disturbed: other work on the machine drew power too" in base["note"]
    assert base["usd_per_m_output_tokens"] == pytest.approx(0.25e6 / 3.6e6 * 0.12)
    assert table.loc[BASE_C4, "note"] == f"not measured: {RAPL_REASON}"
    assert pd.isna(table.loc[BASE_C4, "joules"])
    out = {"energy_csv": tmp_path / "energy.csv", "energy_md": tmp_path / "energy.md"}
    write_energy(metrics, {BASE: KWH}, out)
    md = out["energy_md"].read_text()
    assert "$/M output tokens" in md and "$0.12/kWh energy" in md
    assert "0.2500 [" in md  # the steady state's interval beside its figure
    write_energy(with_energy(tmp_path), None, out)  # nothing measured, nothing priced
    md = out["energy_md"].read_text()
    assert f"- energy: not measured on this machine: {RAPL_REASON}" in md
    assert "No cell's energy was measured." in md and "$/M" not in md


def test_a_cells_repeats_average_their_j_per_token_and_give_its_interval(tmp_path):
    metrics = fixture_metrics(tmp_path)
    runs = []
    for i, j in enumerate([0.24, 0.25, 0.26]):
        run = copy.deepcopy(metrics[BASE])
        run["cell"] = BASE if i == 0 else f"{BASE}__r{i + 1}"
        run["energy"] = measured_energy(j)
        runs.append(run)
    (folded,), _, _ = collapse_repeats(runs)
    assert folded["energy"]["j_per_output_token"] == pytest.approx(0.25)
    assert folded["energy"]["repeats"] == 3
    row = energy_table([folded]).iloc[0]
    assert (
        row["repeats"] == 3 and row["j_per_output_token_lo"] < 0.25 < row["j_per_output_token_hi"]
    )


# --- the card, the front page and the run's last lines ------------------------------------------


def card_text(metrics: dict) -> str:
    cell = next(c for c in fixture_cells() if c.id == metrics["cell"])
    return render_markdown(build_card(cell, metrics))


def test_the_card_has_an_energy_section_with_the_windows_and_the_scope(tmp_path):
    metrics = fixture_metrics(tmp_path)[BASE]
    metrics["energy"] = measured_energy(0.25, window_s=8.0)
    text = card_text(metrics)
    section = text[text.index("## Energy") :]
    assert "| J per output token | 0.25 J |" in section
    assert "8.000 s (epoch 1750000000.000 → 1750000008.000)" in section
    assert "a lower bound on the machine's" in section
    assert "0.25 J per output token [0.2404, 0.26] from 20 slices of 0.40 s" in section
    metrics["energy"] = unmeasured_energy()
    section = card_text(metrics)[card_text(metrics).index("## Energy") :]
    assert f"Not measured: {RAPL_REASON}." in section
    assert f"| rapl | {NO_POWERCAP} |" in section
    del metrics["energy"]  # a result from before energy was read: no section
    assert "## Energy" not in card_text(metrics)


def test_the_front_page_says_what_a_token_costs_or_one_line_why_not(tmp_path):
    out = {"energy_csv": tmp_path / "energy.csv", "energy_md": tmp_path / "energy.md"}
    write_energy(with_energy(tmp_path, **{BASE: measured_energy(0.25)}), {BASE: HOURLY}, out)
    html = "\n".join(token_cost_html(out["energy_csv"]))
    assert "<h2>What a token costs</h2>" in html
    assert BASE in html and BASE_C4 not in html  # the measured cells only
    assert "$3.6/h machine" in html
    write_energy(with_energy(tmp_path), None, out)
    (line,) = token_cost_html(out["energy_csv"])
    assert line == f"<p>energy: not measured on this machine: {RAPL_REASON}</p>"


def test_the_run_ends_with_j_per_token_where_measured_and_why_not_once_where_not():
    measured = {**done("m__e__q__none__c2"), "energy_status": "measured"}
    measured["j_per_output_token"] = 0.2503
    lines = lines_of([measured, done("m__e__q__ngram__c2")])
    assert lines[1].endswith("TTFT median ms  J/out tok")
    first, second = table_rows(lines[1:])
    assert first.words == ["done", "41.88", "135.0", "0.2503"] and len(second.words) == 3
    unread = [
        summary_row(
            {"cell": f"m__e__q__none__c{c}", "status": "done", "energy": unmeasured_energy()}
        )
        for c in (1, 2, 4)
    ]
    lines = lines_of(unread)
    at = lines.index("energy: not measured on this machine: rapl: no powercap folder")
    assert lines[at + 1 : at + 3] == [
        "    (/sys/class/powercap): no RAPL here (a VM?)",
        "3 of 3 cells done.",
    ]
    assert sum("not measured" in line for line in lines) == 1  # once, not per cell
    assert all(len(line) <= 80 for line in lines)
    assert "J/out" not in lines[1]
