"""Summary, index and spec-gain tables from done, failed and blocked metrics; published
reference figures in their own columns."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from tests.support.outputs import (
    BASE,
    BASE_C4,
    BLOCKED,
    DRAFTER,
    FAILED,
    REPO,
    fixture_cells,
    fixture_metrics,
)
from workflow_scripts.config.matrix import load_cells
from workflow_scripts.outputs import compact, labels, spec_gain, tables, writers
from workflow_scripts.outputs.compact import REASON_CHARS, compact_view, summary_row
from workflow_scripts.outputs.report_html import html_table


@pytest.fixture
def cells():
    return fixture_cells()


@pytest.fixture
def metrics(tmp_path):
    return fixture_metrics(tmp_path)


@pytest.fixture
def summary(metrics, cells):
    return tables.summary_table(list(metrics.values()), cells).set_index("cell")


def test_summary_lists_every_cell_in_config_order_with_status_and_reason(metrics, cells):
    frame = tables.summary_table(list(metrics.values()), cells)
    assert list(frame["cell"]) == [cell.id for cell in cells]
    rows = frame.set_index("cell")
    assert rows.loc[BASE, "status"] == "done"
    assert rows.loc[BASE, "decode_tok_s"] == pytest.approx(metrics[BASE]["decode_tok_s"])
    assert rows.loc[BASE, "ttft_median_ms"] == pytest.approx(metrics[BASE]["ttft_ms"]["median"])
    assert rows.loc[BASE, "peak_mem_gib"] == pytest.approx(metrics[BASE]["mem"]["peak_delta_gib"])
    assert rows.loc[DRAFTER, "acceptance_length"] == pytest.approx(2.6)
    assert rows.loc[FAILED, "status"] == "failed"
    assert rows.loc[FAILED, "reason"] == (
        "ServerError: llama-server exited with code 1 before it was ready"
    )
    assert rows.loc[BLOCKED, "status"] == "blocked"
    assert rows.loc[BLOCKED, "reason"] == "a test cell that is listed, never run"
    assert set(tables.SUMMARY_COLUMNS) <= set(frame.columns)


def test_reference_figures_sit_in_their_own_columns(summary, metrics):
    assert summary.loc[BASE, "ref_decode_tok_s"] == 120.0
    assert summary.loc[BASE, "ref_prefill_tok_s"] == 900.0
    assert summary.loc[BASE, "ref_note"] == "invented for the tests"
    # the measured column keeps the measurement, never the published figure
    assert summary.loc[BASE, "decode_tok_s"] == pytest.approx(metrics[BASE]["decode_tok_s"])
    assert summary.loc[BASE, "decode_tok_s"] != 120.0
    assert math.isnan(summary.loc[DRAFTER, "ref_decode_tok_s"])


def test_extra_reference_keys_get_ref_columns():
    reference = {"decode_tok_s": 1.0, "req_per_s": 3.352, "source": "a paper"}
    cell = dataclasses.replace(fixture_cells()[0], reference=reference)
    frame = tables.summary_table([], [cell])
    assert {"ref_req_per_s", "ref_source", "ref_decode_tok_s"} <= set(frame.columns)
    assert frame.loc[0, "ref_req_per_s"] == 3.352
    assert frame.loc[0, "status"] == compact.NOT_RUN


def test_index_view_has_the_seed_columns_and_says_what_happened(summary, cells):
    index = tables.index_table(summary.reset_index(), cells).set_index("Configuration")
    assert list(index.reset_index().columns) == [
        *tables.INDEX_COLUMNS,
        tables.INDEX_REFERENCE_COLUMN,
    ]
    assert index.loc[BASE, "Completed"] == "6/6"
    assert index.loc[BASE, "Ctx"] == 4096
    assert index.loc[BASE, "Conc"] == 2
    assert index.loc[BASE, "Decode tok/s"] == f"{summary.loc[BASE, 'decode_tok_s']:.2f}"
    assert index.loc[BASE, tables.INDEX_REFERENCE_COLUMN] == "120.00"
    assert index.loc[DRAFTER, "Engine (+speculative)"] == (
        "llamacpp-local + ngram (ngram-simple, n_max 8)"
    )
    assert index.loc[FAILED, "Status"].startswith("failed: ServerError: llama-server exited")
    assert index.loc[FAILED, "Completed"] == "0/6, 2 errors"
    assert index.loc[FAILED, "Decode tok/s"] == ""
    assert index.loc[BLOCKED, "Status"] == "blocked: a test cell that is listed, never run"


def test_index_without_references_has_no_published_column(metrics, cells):
    cells = [dataclasses.replace(cell, reference={}) for cell in cells]
    frame = tables.summary_table(list(metrics.values()), cells)
    assert list(tables.index_table(frame, cells).columns) == tables.INDEX_COLUMNS


def test_spec_gain_pairs_each_drafter_with_its_base(metrics, cells):
    merged = tables.merge_with_cells(list(metrics.values()), cells)
    gain = spec_gain.spec_gain_table(merged).set_index("drafter_cell")
    expected = 100 * (metrics[DRAFTER]["decode_tok_s"] / metrics[BASE]["decode_tok_s"] - 1)
    assert gain.loc[DRAFTER, "base_cell"] == BASE
    assert gain.loc[DRAFTER, "decode_gain_pct"] == pytest.approx(expected)
    assert gain.loc[DRAFTER, "flags"] == ""
    assert gain.loc[BLOCKED, "base_cell"] == BASE_C4
    assert gain.loc[BLOCKED, "flags"] == "a cell of the pair did not finish"
    assert pd.isna(gain.loc[BLOCKED, "decode_gain_pct"])


def test_write_tables_writes_every_file_and_links_the_cards(tmp_path, metrics, cells):
    out = {
        f"{name}_{ext}": tmp_path / f"{name}.{ext}"
        for name in ("summary", "index", "spec_gain")
        for ext in ("csv", "md")
    }
    writers.write_tables(list(metrics.values()), cells, out)
    for path in out.values():
        assert path.stat().st_size > 0, path
    index_md = (tmp_path / "index.md").read_text()
    assert f"[{FAILED}](../cells/{FAILED}/card.md)" in index_md
    assert "blocked: a test cell that is listed, never run" in index_md
    rows = pd.read_csv(tmp_path / "summary.csv")
    assert len(rows) == len(cells)
    assert "ServerError" in (tmp_path / "summary.md").read_text()


def test_optional_figures_follow_the_matrix(cells):
    assert labels.optional_summary_figures(cells) == [
        "throughput_vs_concurrency",
        "measured_vs_reference",
    ]
    default = load_cells(REPO / "config.yaml")
    # the default varies concurrency only along a sweep (workload `sweep`: drawn by the sweep
    # figures, no second concurrency view) and carries no published figures
    assert any(cell.sweep for cell in default)
    assert labels.optional_summary_figures(default) == []
    assert "pareto.png" in labels.sweep_outputs(default)


# summary.csv's header before build variants: a contract, every column kept in its place.
CSV_HEADER_BEFORE = (
    "cell,model,engine,quant,drafter,workload,concurrency,num_prompts,status,completed,errors,"
    "incomplete,prefill_tok_s,decode_tok_s,req_per_s,ttft_median_ms,tpot_median_ms,itl_median_ms,"
    "e2el_median_ms,peak_mem_gib,acceptance_rate,acceptance_length,hit_time_cap,duration_s,"
    "synthetic,reason,ref_decode_tok_s,ref_prefill_tok_s,ref_ttft_median_ms,ref_tpot_median_ms,"
    "ref_peak_mem_gib,ref_completed,ref_note"
)
COMPACT_HEADERS = [
    "cell",
    "status",
    "completed",
    "decode_tok_s",
    "prefill_tok_s",
    "ttft_median_ms",
    "tpot_median_ms",
    "peak_mem_gib",
    "server_rss_peak_gib",
    "acceptance_rate",
    "acceptance_length",
    "reason",
]


def out_paths(tmp_path) -> dict:
    return {
        f"{name}_{ext}": tmp_path / f"{name}.{ext}"
        for name in ("summary", "index", "spec_gain")
        for ext in ("csv", "md")
    }


def test_summary_csv_keeps_every_column_and_appends_the_build_variant(tmp_path, metrics, cells):
    metrics[BASE]["engine_info"] = {**metrics[BASE]["engine_info"], "variant": "native-no-amx"}
    writers.write_tables(list(metrics.values()), cells, out_paths(tmp_path))
    csv_text = (tmp_path / "summary.csv").read_text()
    assert csv_text.splitlines()[0] == ",".join(
        [CSV_HEADER_BEFORE, "build_variant", *tables.LATER_COLUMNS[1:]]
    )
    rows = pd.read_csv(tmp_path / "summary.csv", keep_default_na=False).set_index("cell")
    assert rows.loc[BASE, "build_variant"] == "native-no-amx"
    assert rows.loc[DRAFTER, "build_variant"] == ""  # an old stamp: no variant


def test_summary_md_shows_the_compact_view_and_says_where_every_column_is(tmp_path, metrics, cells):
    writers.write_tables(list(metrics.values()), cells, out_paths(tmp_path))
    text = (tmp_path / "summary.md").read_text()
    assert "summary.csv holds every column" in text
    header = next(line for line in text.splitlines() if line.startswith("| cell"))
    assert [h.strip() for h in header.strip("|").split("|")] == [
        "cell",
        "status",
        "completed",
        "completed (published)",
        "decode_tok_s",
        "decode_tok_s (published)",
        "prefill_tok_s",
        "prefill_tok_s (published)",
        *COMPACT_HEADERS[5:],
    ]
    assert "itl_median_ms" not in text and "ref_note" not in text
    assert max(len(line) for line in text.splitlines() if line.startswith("|")) < 400
    base = next(line for line in text.splitlines() if line.startswith(f"| {BASE} "))
    assert f"| {metrics[BASE]['decode_tok_s']:.2f} " in base and "| 120.00 " in base


def test_compact_view_on_hand_made_rows():
    done = summary_row(
        {
            "cell": "a",
            "status": "done",
            "completed": 32,
            "num_prompts": 32,
            "decode_tok_s": 120.456,
            "ttft_ms": {"median": 12.34},
            "spec": {"acceptance_rate": 0.55555, "mean_acceptance_length": 2.4},
        },
        {"decode_tok_s": 150, "mean_acceptance_length": "2.6-2.7"},
    )
    failed = summary_row(
        {
            "cell": "b",
            "status": "failed",
            "reason": "x" * 300,
            "decode_tok_s": 9.0,
            "errors": 2,
            "completed": 0,
            "num_prompts": 32,
        }
    )
    headers, rows = compact_view([done, failed])
    expected = list(COMPACT_HEADERS)
    expected.insert(expected.index("decode_tok_s") + 1, "decode_tok_s (published)")
    expected.insert(expected.index("reason"), "acceptance_length (published)")
    assert headers == expected
    assert rows[0]["completed"] == "32/32"
    assert rows[0]["decode_tok_s"] == "120.46" and rows[0]["decode_tok_s (published)"] == "150"
    assert rows[0]["ttft_median_ms"] == "12.3" and rows[0]["acceptance_rate"] == "0.556"
    assert rows[0]["acceptance_length (published)"] == "2.6-2.7"
    assert rows[0]["reason"] == "" and rows[0]["prefill_tok_s"] == ""
    assert rows[1]["completed"] == "0/32, 2 errors"
    assert rows[1]["decode_tok_s"] == ""  # a failed cell's figures compare with nothing
    assert rows[1]["reason"] == "x" * (REASON_CHARS - 3) + "..."
    assert compact_view([failed])[0] == COMPACT_HEADERS  # no reference, no published column


def test_html_tables_right_align_numbers_written_as_text():
    table = html_table(pd.DataFrame({"decode_tok_s": ["41.88", ""], "status": ["done", "2"]}))
    assert '<td class="num">41.88</td>' in table and "<td>done</td>" in table


def test_summary_flags_acceptance_the_time_cap_put_out_of_step(tmp_path, metrics, cells):
    """A drafter cell whose cap cancelled requests: summary.md says its acceptance figures are
    not those of the completed requests; the other cells are not named."""
    note = "2 requests were cancelled at the time cap. These acceptance figures are ..."
    capped = {**metrics[DRAFTER], "spec": {**metrics[DRAFTER]["spec"], "cap_note": note}}
    out = {
        f"{name}_{ext}": tmp_path / f"{name}.{ext}"
        for name in ("summary", "index", "spec_gain")
        for ext in ("csv", "md")
    }
    writers.write_tables([*(m for c, m in metrics.items() if c != DRAFTER), capped], cells, out)
    text = (tmp_path / "summary.md").read_text()
    assert f"- `{DRAFTER}`: {note}" in text
    assert f"`{BASE}`" not in text.split("|")[0]
    writers.write_tables(list(metrics.values()), cells, out)
    assert "read with care" not in (tmp_path / "summary.md").read_text()
