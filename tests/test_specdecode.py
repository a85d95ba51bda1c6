"""Speculative-decoding acceptance: counter arithmetic on recorded text, and a real llama-server
whose drafter is the model itself, where acceptance is known by construction."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.pipeline_helpers import tiny_config, tiny_workload
from workflow_scripts.engines import adapter_for
from workflow_scripts.engines.provision import provision
from workflow_scripts.loadgen.records import RequestRecord
from workflow_scripts.matrix import build_cells, validate_config
from workflow_scripts.run_cell import CellInputs, run_cell
from workflow_scripts.specdecode import acceptance_from_counters, acceptance_from_timings
from workflow_scripts.weights import fetch_weights

# Recorded from llama-server (llama-cpp-python 0.3.36's llama.cpp) with --metrics.
LLAMACPP_BEFORE = """# HELP llamacpp:spec_decode_num_drafts_total Speculative: steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_draft_tokens_total 10
llamacpp:spec_decode_num_accepted_tokens_total 6
llamacpp:spec_decode_num_drafts_total 4
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 3
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 2
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 1
"""
LLAMACPP_AFTER = """llamacpp:spec_decode_num_draft_tokens_total 150
llamacpp:spec_decode_num_accepted_tokens_total 96
llamacpp:spec_decode_num_drafts_total 54
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 43
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 32
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 21
"""


def test_llamacpp_counter_deltas():
    adapter = adapter_for("llamacpp")
    spec = acceptance_from_counters(adapter.parse_spec_metrics(LLAMACPP_BEFORE),
                                    adapter.parse_spec_metrics(LLAMACPP_AFTER))
    # deltas: drafts 50, draft tokens 140, accepted 90, per position 40/30/20
    assert spec["source"] == "metrics"
    assert spec["acceptance_rate"] == pytest.approx(90 / 140)
    assert spec["mean_acceptance_length"] == pytest.approx(1 + 90 / 50)
    assert spec["per_position"] == pytest.approx([0.8, 0.6, 0.4])


def test_timings_fallback_sums_draft_counts():
    records = [RequestRecord(index=i, prompt_index=i, status="ok",
                             timings={"draft_n": 8, "draft_n_accepted": a})
               for i, a in enumerate((8, 4, 0))]
    records.append(RequestRecord(index=9, prompt_index=9, status="ok", warmup=True,
                                 timings={"draft_n": 100, "draft_n_accepted": 0}))
    spec = acceptance_from_timings(records)
    assert spec["source"] == "timings"
    assert spec["acceptance_rate"] == pytest.approx(12 / 24)


def test_no_counters_means_no_figure():
    adapter = adapter_for("llamacpp")
    empty = adapter.parse_spec_metrics("llamacpp:prompt_tokens_total 5\n")
    assert acceptance_from_counters(empty, empty) is None


@pytest.mark.slow
def test_self_drafting_model_accepts_every_draft(tmp_path):
    """SmolLM2 drafting for itself at temperature 0 (draft-simple, 4 tokens a step, no early
    stop, ignore_eos so every request runs its full budget): the draft's greedy token is the
    target's, so drafted tokens are accepted. Tolerance, from what this build does: across runs
    about one draft step in 50-60 is rejected at its first token (a near-tie whose argmax flips
    between the draft's one-token decode and the target's 5-token verify batch, which run
    different kernels on Q4_1), so acceptance >= 0.95; and each request's last draft is cut short
    by its remaining max_tokens, so position i >= 1 - (requests + 2) / drafts."""
    config = tiny_config(
        [{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny",
          "drafter": "self"}],
        workloads={"tiny": tiny_workload(num_prompts=6, max_tokens=48, concurrency=2,
                                         ignore_eos=True)},
        drafters={"self": {"kind": "draft-simple", "model": "smollm2-135m", "n_max": 4,
                           "settings": {"spec_draft_p_min": 0}}},
    )
    (cell,) = build_cells(validate_config(config))
    engine_info = provision(cell.engine, cell.engine_spec)
    manifest = fetch_weights(cell.weights, tmp_path / "weights.json")
    result = run_cell(CellInputs(cell, tmp_path / "cell", engine_info, manifest, manifest))
    assert result["status"] == "done", result.get("reason")
    assert "--model-draft" in result["server_command"]
    spec = result["spec"]
    assert spec["source"] == "metrics"
    assert spec["acceptance_rate"] >= 0.95
    assert spec["mean_acceptance_length"] > 4.0
    assert len(spec["per_position"]) == 4
    assert spec["per_position"][0] >= 0.95
    requests = result["completed"]
    for rate in spec["per_position"]:
        assert rate >= 1 - (requests + 2) / spec["drafts"]
    assert spec["timings_acceptance_rate"] == pytest.approx(spec["acceptance_rate"], abs=0.02)
    on_disk = json.loads((tmp_path / "cell" / "metrics.json").read_text())
    assert on_disk["spec"] == spec


def _records(cell_done: dict[int, int]) -> list[RequestRecord]:
    """One request per prompt: prompt index -> completion tokens (0: the request failed).
    Request i is sent at i seconds and runs 1 s; TTFT 0.1 s."""
    out = []
    for i, (prompt, tokens) in enumerate(sorted(cell_done.items())):
        ok = tokens > 0
        out.append(RequestRecord(index=i, prompt_index=prompt, status="ok" if ok else "error",
                                 sent_s=float(i), ttft_s=0.1, e2e_s=1.0,
                                 prompt_tokens=10, completion_tokens=tokens if ok else None))
    return out


def test_pairs_that_completed_different_prompts_get_common_subset_figures():
    from workflow_scripts.aggregate import spec_gain_table

    base = {"cell": "m__e__q__none__w", "model": "m", "engine": "e", "quant": "q",
            "workload": "w", "drafter": "none", "status": "done", "decode_tok_s": 10.0}
    drafter = {**base, "cell": "m__e__q__ngram__w", "drafter": "ngram", "decode_tok_s": 30.0}
    records = {
        base["cell"]: _records({0: 10, 1: 10, 2: 10}),
        drafter["cell"]: _records({0: 20, 1: 20, 2: 0}),  # prompt 2 failed here
    }
    (row,) = spec_gain_table([base, drafter], records).to_dict("records")
    assert row["common_prompts"] == 2
    # prompts 0 and 1: sent at 0 s and 1 s, each 1 s long -> a 2 s span
    assert row["base_decode_tok_s_common"] == pytest.approx(20 / 2)
    assert row["drafter_decode_tok_s_common"] == pytest.approx(40 / 2)
    assert row["decode_gain_pct_common"] == pytest.approx(100.0)
    assert "different prompts completed" in row["flags"]

    same = {**records, drafter["cell"]: _records({0: 20, 1: 20, 2: 20})}
    (row,) = spec_gain_table([base, drafter], same).to_dict("records")
    assert pd.isna(row["common_prompts"]) and row["flags"] == ""
