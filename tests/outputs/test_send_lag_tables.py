"""An open-loop cell (a trace, Poisson `request_rate`) shows TTFT and E2E from each request's
scheduled time beside those from the send, and a cell whose send lag passed the stated share of
its TTFT (loadgen.metrics.SEND_LAG_LIMIT_PCT, at the median or p99) is flagged wherever its
figures are shown: summary.csv and summary.md, sweeps.csv, sweeps.md and the series' card, the
cell's card, and over a cell's repeats (a flag raised in any one stays). Hand-made records through
the load generator's own `compute_metrics`; a closed loop shows none of it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.outputs.test_sweeps import outputs_under
from tests.support.sweeps import point_metrics, series_cells
from workflow_scripts.loadgen.metrics import SEND_LAG_LIMIT_PCT, compute_metrics, sent_late
from workflow_scripts.loadgen.records import OK, RequestRecord
from workflow_scripts.outputs import sweeps
from workflow_scripts.outputs.card import build_card, render_markdown
from workflow_scripts.outputs.compact import compact_view
from workflow_scripts.outputs.repeats import collapse_repeats
from workflow_scripts.outputs.sweeps.files import write_sweeps
from workflow_scripts.outputs.tables import summary_frame, summary_rows
from workflow_scripts.outputs.writers import summary_intro
from workflow_scripts.process.machine_use import FLAGGED_IN_RUN

TTFT_MS, E2E_MS = 50.0, 200.0
FROM_LOAD = ("ttft_ms", "e2el_ms", "send_lag_ms")
FROM_LOAD += ("ttft_from_schedule_ms", "e2el_from_schedule_ms", "send_lag_check")


def measured(cell, wait_ms: float | None, n: int = 20) -> dict:
    """A point's metrics.json with the latency figures of n requests, TTFT 50 ms and E2E 200 ms
    from the send, each sent `wait_ms` after it was due (None: a closed loop)."""
    records = [
        RequestRecord(
            index=i,
            prompt_index=i,
            status=OK,
            sent_s=0.1 * i + (wait_ms or 0.0) / 1000,
            scheduled_s=None if wait_ms is None else 0.1 * i,
            ttft_s=TTFT_MS / 1000,
            e2e_s=E2E_MS / 1000,
            completion_tokens=10,
        )
        for i in range(n)
    ]
    figures = compute_metrics(records)
    return {**point_metrics(cell, 10.0, 20.0), **{key: figures[key] for key in FROM_LOAD}}


def rate_series():
    """Two points of a request-rate sweep: r0.5 sent on time, r2.5 each request 300 ms late."""
    cells = series_cells(False, [0.5, 2.5], axis="request_rate")
    return cells, [measured(cells[0], 0.0), measured(cells[1], 300.0)]


def test_sweeps_show_latency_from_the_schedule_and_flag_the_point_sent_late(tmp_path):
    cells, metrics = rate_series()
    table = sweeps.sweep_table(metrics, cells, {}).set_index("point")
    assert list(table["send_lag_flagged"]) == [False, True]
    assert list(table["ttft_median_ms"]) == [pytest.approx(TTFT_MS)] * 2  # from the send
    assert list(table["ttft_from_schedule_median_ms"]) == [
        pytest.approx(TTFT_MS),
        pytest.approx(TTFT_MS + 300.0),
    ]
    assert table.loc["r2.5", "e2el_from_schedule_p99_ms"] == pytest.approx(E2E_MS + 300.0)
    assert table.loc["r2.5", "send_lag_p50_ms"] == pytest.approx(300.0)
    out = outputs_under(tmp_path)
    write_sweeps(metrics, cells, {}, {}, out)
    lines = [line for line in Path(out["sweeps_md"]).read_text().splitlines() if "|" in line]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert [row[header.index("sent late")] for row in rows] == ["", "yes"]
    assert [row[header.index("ttft_from_schedule_median_ms")] for row in rows] == ["50", "350"]
    text = Path(out["sweeps_md"]).read_text()
    (said,) = [line for line in text.splitlines() if "Sent late (" in line]
    assert f"Sent late (send lag past {SEND_LAG_LIMIT_PCT:g} % of TTFT" in said
    assert said.endswith(": r2.5")


def test_a_closed_loop_sweep_has_no_schedule_columns_shown_and_nothing_flagged(tmp_path):
    cells = series_cells(False, [1, 2])
    metrics = [measured(cell, None) for cell in cells]
    table = sweeps.sweep_table(metrics, cells, {})
    assert table["ttft_from_schedule_median_ms"].isna().all()
    assert list(table["send_lag_flagged"]) == [None, None]
    out = outputs_under(tmp_path)
    write_sweeps(metrics, cells, {}, {}, out)
    text = Path(out["sweeps_md"]).read_text()
    header = next(line for line in text.splitlines() if line.startswith("|"))
    assert "sent late" not in header and "from_schedule" not in header
    assert "Sent late (" not in text


def test_the_summary_carries_the_figures_from_the_schedule_and_lists_the_late_cell():
    cells, metrics = rate_series()
    rows = summary_rows(metrics)
    frame = summary_frame(rows).set_index("cell")
    late, quiet = cells[1].id, cells[0].id
    assert bool(frame.loc[late, "send_lag_flagged"]) is True
    assert bool(frame.loc[quiet, "send_lag_flagged"]) is False
    assert frame.loc[late, "ttft_from_schedule_median_ms"] == pytest.approx(350.0)
    assert frame.loc[late, "ttft_median_ms"] == pytest.approx(TTFT_MS)
    assert frame.loc[late, "send_lag_p99_ms"] == pytest.approx(300.0)
    intro = summary_intro(metrics, rows)
    listed = intro.split("Open-loop arrivals sent late (they waited for a free slot):")[1]
    assert f"- `{late}`: requests sent late for a free slot: send lag p50 600 %" in listed
    assert quiet not in listed
    headers, view = compact_view(rows)
    assert "ttft_from_schedule_median_ms" in headers
    assert [row["ttft_from_schedule_median_ms"] for row in view] == ["50.0", "350.0"]


def test_the_cell_card_shows_latency_from_the_schedule_and_says_it_was_sent_late():
    cells, metrics = rate_series()
    text = render_markdown(build_card(cells[1], metrics[1]))
    assert "| TTFT from schedule | 350.0 ms (350.0 / 350.0) |" in text
    assert "| E2E latency from schedule | 500.0 ms (500.0 / 500.0) |" in text
    assert "sent late: requests sent late for a free slot: send lag p50 600 % of the TTFT" in text
    quiet = render_markdown(build_card(cells[0], metrics[0]))
    assert "TTFT from schedule" in quiet and "sent late" not in quiet
    closed = render_markdown(build_card(cells[0], measured(cells[0], None)))
    assert "from schedule" not in closed and "Send lag" not in closed


def test_a_send_lag_flag_in_any_repeat_stays():
    cells, metrics = rate_series()
    quiet, late = copy.deepcopy(metrics[0]), copy.deepcopy(metrics[1])
    late["cell"] = quiet["cell"] + "__r2"
    folded, _, _ = collapse_repeats([quiet, late])
    assert sent_late(folded[0]) is True
    assert folded[0]["send_lag_check"][FLAGGED_IN_RUN] == late["cell"]
    both = [
        copy.deepcopy(metrics[0]),
        {**copy.deepcopy(metrics[0]), "cell": quiet["cell"] + "__r2"},
    ]
    assert sent_late(collapse_repeats(both)[0][0]) is False
