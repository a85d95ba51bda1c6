"""The client and interference checks where people read them: summary.csv's columns, a line per
flagged cell in summary.md's intro (the way a drifting cell is listed), a section on the card,
and a cell's repeats keeping a flag any one of them raised. The checks' objects are computed
by workflow_scripts.process.machine_use from hand-made snapshots, as a run computes them from real
ones."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from tests.support.outputs import BASE, BASE_C4, DRAFTER, cell_by_id, fixture_cells, fixture_metrics
from workflow_scripts.outputs import card as cards
from workflow_scripts.outputs import tables, writers
from workflow_scripts.outputs.repeats import combine
from workflow_scripts.process import machine_use as mu
from workflow_scripts.process.memory import KIB_PER_GIB, MemorySample


def checks(busiest_s: float, other_s: float, other_mem_gib: float = 0.0) -> dict:
    """metrics.json's `client` and `interference` of a 10 s bench: the client's busiest process
    used `busiest_s`, something outside both trees `other_s` and `other_mem_gib`."""
    start = mu.UseSnapshot(0.0, 100.0, (mu.ProcessCpu(5, 1.0, 20.0, 0.0),),
                           (mu.ProcessCpu(1, 1.0, 2.0, 0.0),))  # fmt: skip
    end = mu.UseSnapshot(
        10.0,
        100.0 + 8.0 + busiest_s + other_s,
        (mu.ProcessCpu(5, 1.0, 28.0, 0.0),),
        (mu.ProcessCpu(1, 1.0, 2.0 + busiest_s, 0.0),),
    )
    avail = 8 * KIB_PER_GIB
    samples = [
        MemorySample(0.0, "bench", avail, KIB_PER_GIB, None, 0),
        MemorySample(1.0, "bench", avail - int(other_mem_gib * KIB_PER_GIB), KIB_PER_GIB, None, 0),
    ]
    choice = {"processes": 1, "processes_source": "auto", "expected_chunks_per_s": 400.0,
              "cores": 2}  # fmt: skip
    return {
        "client": mu.client_use(start, end, choice),
        "interference": mu.interference(start, end, samples),
    }


@pytest.fixture
def metrics(tmp_path):
    found = fixture_metrics(tmp_path)
    found[BASE].update(checks(busiest_s=9.5, other_s=0.5))  # client at 95 % of a core
    found[BASE_C4].update(checks(busiest_s=2.0, other_s=6.0, other_mem_gib=1.0))
    found[DRAFTER].update(checks(busiest_s=2.0, other_s=0.5))  # clear
    return found


def out_paths(tmp_path) -> dict:
    return {
        f"{name}_{ext}": tmp_path / f"{name}.{ext}"
        for name in ("summary", "index", "spec_gain")
        for ext in ("csv", "md")
    }


def test_summary_has_the_checks_and_lists_each_flagged_cell(tmp_path, metrics):
    writers.write_tables(list(metrics.values()), fixture_cells(), out_paths(tmp_path))
    rows = pd.read_csv(tmp_path / "summary.csv").set_index("cell")
    assert rows.loc[BASE, "client_limited"] and not rows.loc[BASE, "interference"]
    assert rows.loc[BASE, "client_max_process_percent_of_core"] == pytest.approx(95.0)
    assert rows.loc[BASE, "client_processes"] == 1
    assert rows.loc[BASE_C4, "interference"] and not rows.loc[BASE_C4, "client_limited"]
    assert rows.loc[BASE_C4, "other_cpu_percent_of_core"] == pytest.approx(60.0)
    assert rows.loc[BASE_C4, "other_mem_rise_gib"] == pytest.approx(1.0)
    assert not rows.loc[DRAFTER, "client_limited"] and not rows.loc[DRAFTER, "interference"]
    intro = (tmp_path / "summary.md").read_text().split("| cell")[0]
    client = intro.split("The load client may have limited the measurement:")[1]
    assert f"- `{BASE}`: a client process used 95 % of a core" in client
    other = intro.split("Other work on the machine during the bench:")[1]
    assert f"- `{BASE_C4}`: other processes used 60 % of a core of CPU and 1.00 GiB" in other
    assert DRAFTER not in intro


def test_card_shows_the_checks_with_their_verdicts(metrics):
    flagged = cards.render_markdown(cards.build_card(cell_by_id(BASE_C4), metrics[BASE_C4]))
    section = flagged.split("## Client and machine during the bench")[1].split("\n## ")[0]
    assert "| Load processes | 1, chosen for 400 expected chunks/s on 2 usable core(s) |" in section
    assert "| CPU outside server and client, % of one core | 60 % (whole machine 160 %" in section
    assert "| Interference check | disturbed: other processes used 60 % of a core of CPU" in section
    assert "| Client check | clear: no client process at 85 % of a core |" in section
    limited = cards.render_markdown(cards.build_card(cell_by_id(BASE), metrics[BASE]))
    assert "| Client check | a client process used 95 % of a core" in limited
    assert "| Interference check | clear: under 25 % of a core and 0.50 GiB |" in limited
    remeasured = {**metrics[BASE_C4], "disturbed_attempts": [{"attempt": 1}]}
    again = cards.render_markdown(cards.build_card(cell_by_id(BASE_C4), remeasured))
    assert "; measured 2 times, disturbed each time (the last is kept) |" in again
    old = {k: v for k, v in metrics[DRAFTER].items() if k not in ("client", "interference")}
    assert "Client and machine" not in cards.render_markdown(
        cards.build_card(cell_by_id(DRAFTER), old)
    )  # a run from before the checks: no section


def test_a_flag_raised_in_one_repeat_stays_on_the_cell(metrics):
    first = copy.deepcopy(metrics[DRAFTER])
    second = {**copy.deepcopy(metrics[BASE_C4]), "cell": DRAFTER + "__r2"}
    folded = combine(DRAFTER, [first, second])
    assert folded["interference"]["flagged"] and folded["interference"]["run"] == DRAFTER + "__r2"
    assert not folded["client"]["limited"]
    note = mu.interference_note(folded["interference"])
    assert note.endswith(f"in run `{DRAFTER}__r2`")
    row = tables.check_columns(folded)
    assert row["interference"] and row["interference_note"] == note
