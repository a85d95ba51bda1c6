"""Repeats: `repeats: N` on a workload makes N targets per cell, repeat 1 being the cell exactly
as without repeats (same id, same settings); the tables fold them back into one row with a
t-interval from the repeats."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import yaml

from tests.support.outputs import BASE, BLOCKED, CONFIG, DRAFTER, FAILED, FIXTURES, fixture_metrics
from workflow_scripts.atomic import canonical_json
from workflow_scripts.config.cell_ids import repeat_id, repeat_of
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.config.resources import resources_by_cell
from workflow_scripts.outputs import aggregate, spec_gain, tables, writers
from workflow_scripts.outputs.repeats import collapse_repeats
from workflow_scripts.outputs.stats import t_interval
from workflow_scripts.vocabulary import Cell


def config_with_repeats(repeats: int | None) -> dict:
    raw = yaml.safe_load(CONFIG.read_text())
    if repeats is not None:
        raw["workloads"]["c2"]["repeats"] = repeats
    return validate_config(raw)


def cell_params(cells) -> dict[str, str]:
    """What the cell rule takes as its params (rules/common.smk: cell_settings)."""
    return {c.id: canonical_json({**c.to_dict(), "reference": {}}) for c in cells}


def test_repeats_add_targets_and_leave_every_existing_cell_as_it_was():
    today = cell_params(build_cells(config_with_repeats(None)))
    assert cell_params(build_cells(config_with_repeats(1))) == today  # `repeats: 1` is today
    three = cell_params(build_cells(config_with_repeats(3)))
    assert {k: v for k, v in three.items() if k in today} == today
    assert set(three) - set(today) == {
        f"{BASE}__r2",
        f"{BASE}__r3",
        f"{DRAFTER}__r2",
        f"{DRAFTER}__r3",
        f"{FAILED}__r2",
        f"{FAILED}__r3",
    }
    # adding a 4th repeat adds exactly its targets, nothing else changes
    four = cell_params(build_cells(config_with_repeats(4)))
    assert {k: v for k, v in four.items() if k in three} == three
    assert set(four) - set(three) == {f"{BASE}__r4", f"{DRAFTER}__r4", f"{FAILED}__r4"}
    # a repeat runs the same settings as its cell; only the id differs
    r2 = json.loads(three[f"{BASE}__r2"])
    assert {**r2, "id": BASE} == json.loads(three[BASE])
    # a blocked cell is listed once, never repeated; its workload (c4) has no repeats anyway
    assert not any(cell.startswith(BLOCKED + "__r") for cell in three)
    assert set(resources_by_cell(config_with_repeats(3))) == set(three)


def test_repeat_ids_read_back():
    assert repeat_id(BASE, 1) == BASE and repeat_id(BASE, 2) == f"{BASE}__r2"
    assert repeat_of(f"{BASE}__r12") == (BASE, 12)
    assert repeat_of(BASE) == (BASE, 1)
    assert repeat_of("m__e__q__none__r2") == ("m__e__q__none__r2", 1)  # a workload named r2


def test_repeats_must_be_a_positive_integer():
    raw = yaml.safe_load(CONFIG.read_text())
    raw["workloads"]["c2"]["repeats"] = 0
    with pytest.raises(Exception, match="repeats"):
        validate_config(raw)


def repeated_metrics(tmp_path, decode=(30.0, 33.0, 31.5), drafter_decode=None) -> list[dict]:
    """The fixture results with BASE (and optionally DRAFTER) run three times."""
    metrics = fixture_metrics(tmp_path)
    out = [m for cell, m in metrics.items() if cell not in (BASE, DRAFTER)]
    for cell, values in ((BASE, decode), (DRAFTER, drafter_decode or decode)):
        for k, value in enumerate(values, start=1):
            run = copy.deepcopy(metrics[cell])
            run["cell"] = repeat_id(cell, k)
            run["decode_tok_s"] = value
            run["ttft_ms"]["median"] += k
            run["mem"]["peak_delta_gib"] += 0.01 * k
            out.append(run)
    return out


def repeat_cells() -> list[Cell]:
    return build_cells(config_with_repeats(3))


def out_paths(tmp_path) -> dict:
    return {
        f"{name}_{ext}": tmp_path / f"{name}.{ext}"
        for name in ("summary", "index", "spec_gain")
        for ext in ("csv", "md")
    }


def test_summary_folds_repeats_into_one_row_with_a_repeats_interval(tmp_path):
    metrics = repeated_metrics(tmp_path)
    records = writers.load_records(sorted((FIXTURES / "cells").glob("*/requests.jsonl")))
    writers.write_tables(metrics, repeat_cells(), out_paths(tmp_path), None, records)
    rows = pd.read_csv(tmp_path / "summary.csv").set_index("cell")
    assert not any("__r" in cell for cell in rows.index)  # one row per cell
    base = rows.loc[BASE]
    expected = t_interval([30.0, 33.0, 31.5])
    assert base["decode_tok_s"] == pytest.approx(expected.value)
    assert (base["decode_tok_s_lo"], base["decode_tok_s_hi"]) == pytest.approx(
        (expected.lo, expected.hi)
    )
    assert base["interval_source"] == "repeats" and base["interval_n"] == 3
    assert base["repeats"] == 3
    assert base["completed"] == 18 and base["num_prompts"] == 18  # counts add up
    # memory has an interval now: it comes from the repeats
    assert base["peak_mem_gib_lo"] < base["peak_mem_gib"] < base["peak_mem_gib_hi"]
    # a cell run once keeps its bootstrap
    assert rows.loc["tiny-llama__llamacpp-local__q4_0__none__c4", "interval_source"] == "bootstrap"
    text = (tmp_path / "summary.md").read_text()
    line = next(x for x in text.splitlines() if x.startswith(f"| {BASE} "))
    assert f"{expected.value:.2f} ± {expected.half_width:.2f}" in line and "3 repeats" in line


def test_spec_gain_from_repeats_says_so(tmp_path):
    metrics = repeated_metrics(
        tmp_path, decode=(30.0, 30.5, 29.5), drafter_decode=(36.0, 36.6, 35.4)
    )
    table = spec_gain.spec_gain_table(*collapse_repeats(metrics, repeat_cells())[::2])
    row = table.set_index("drafter_cell").loc[DRAFTER]
    assert row["base_cell"] == BASE
    assert row["decode_gain_pct"] == pytest.approx(20.0)
    assert row["verdict"] == "faster"
    assert row["gain_interval_source"] == "repeats, 3 + 3 runs"


def test_two_repeats_give_a_mean_and_no_interval(tmp_path):
    metrics = repeated_metrics(tmp_path, decode=(30.0, 34.0))
    rows = tables.summary_table(*collapse_repeats(metrics, repeat_cells())[:2])
    base = rows.set_index("cell").loc[BASE]
    assert base["decode_tok_s"] == pytest.approx(32.0) and base["repeats"] == 2
    assert pd.isna(base["decode_tok_s_lo"]) and pd.isna(base["interval_source"])


def test_a_failed_repeat_is_counted_and_the_others_make_the_figures(tmp_path):
    metrics = repeated_metrics(tmp_path, decode=(30.0, 32.0, 31.0))
    failed = next(m for m in metrics if m["cell"] == f"{BASE}__r2")
    failed.update(status="failed", reason="ServerError: gone", completed=0, decode_tok_s=None)
    combined = {m["cell"]: m for m in collapse_repeats(metrics)[0]}[BASE]
    assert combined["status"] == "done" and combined["decode_tok_s"] == pytest.approx(30.5)
    assert combined["repeats"]["runs"] == 3 and combined["repeats"]["done"] == 2
    assert combined["completed"] == 12 and combined["num_prompts"] == 18


def test_latency_samples_of_repeats_pool_into_one_box_per_cell():
    samples = {
        BASE: {"ttft_ms": [3.0, 1.0], "tpot_ms": [10.0]},
        f"{BASE}__r2": {"ttft_ms": [2.0], "tpot_ms": [11.0]},
        DRAFTER: {"ttft_ms": [5.0], "tpot_ms": []},
    }
    assert aggregate.pooled_repeats(samples) == {
        BASE: {"ttft_ms": [1.0, 2.0, 3.0], "tpot_ms": [10.0, 11.0]},
        DRAFTER: {"ttft_ms": [5.0], "tpot_ms": []},
    }
