"""Speculative-decoding acceptance: counter arithmetic on recorded text, SGLang's running mean and
per-response fields (stand-in texts in SGLang's formats: it cannot run here), the time-cap flag,
and a real llama-server whose drafter is the model itself, where acceptance is known by
construction."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.support.pipeline import tiny_config, tiny_workload
from workflow_scripts.cell.run import CellInputs, run_cell
from workflow_scripts.cell.specdecode import (
    acceptance_from_counters,
    acceptance_from_request_fields,
    acceptance_from_server_info,
    acceptance_from_timings,
)
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.engines import adapter_for
from workflow_scripts.engines.provision import provision
from workflow_scripts.loadgen.records import RequestRecord
from workflow_scripts.weights.fetch import fetch_weights

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
    spec = acceptance_from_counters(
        adapter.parse_spec_metrics(LLAMACPP_BEFORE), adapter.parse_spec_metrics(LLAMACPP_AFTER)
    )
    # deltas: drafts 50, draft tokens 140, accepted 90, per position 40/30/20
    assert spec["source"] == "metrics"
    assert spec["acceptance_rate"] == pytest.approx(90 / 140)
    assert spec["mean_acceptance_length"] == pytest.approx(1 + 90 / 50)
    assert spec["per_position"] == pytest.approx([0.8, 0.6, 0.4])


def test_timings_fallback_sums_draft_counts():
    records = [
        RequestRecord(
            index=i, prompt_index=i, status="ok", timings={"draft_n": 8, "draft_n_accepted": a}
        )
        for i, a in enumerate((8, 4, 0))
    ]
    records.append(
        RequestRecord(
            index=9,
            prompt_index=9,
            status="ok",
            warmup=True,
            timings={"draft_n": 100, "draft_n_accepted": 0},
        )
    )
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
        [
            {
                "model": "smollm2-135m",
                "engine": "llamacpp-cpu",
                "workload": "tiny",
                "drafter": "self",
            }
        ],
        workloads={
            "tiny": tiny_workload(num_prompts=6, max_tokens=48, concurrency=2, ignore_eos=True)
        },
        drafters={
            "self": {
                "kind": "draft-simple",
                "model": "smollm2-135m",
                "n_max": 4,
                "settings": {"spec_draft_p_min": 0},
            }
        },
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
        out.append(
            RequestRecord(
                index=i,
                prompt_index=prompt,
                status="ok" if ok else "error",
                sent_s=float(i),
                ttft_s=0.1,
                e2e_s=1.0,
                prompt_tokens=10,
                completion_tokens=tokens if ok else None,
            )
        )
    return out


def test_pairs_that_completed_different_prompts_get_common_subset_figures():
    from workflow_scripts.outputs.spec_gain import spec_gain_table

    base = {
        "cell": "m__e__q__none__w",
        "model": "m",
        "engine": "e",
        "quant": "q",
        "workload": "w",
        "drafter": "none",
        "status": "done",
        "decode_tok_s": 10.0,
    }
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


# -- SGLang: a running mean read at warmup end and bench end, or per-response fields ------------
def _sglang_reading(accept_length: float | None):
    """`/server_info` as SGLang writes it (STAND-IN text: SGLang cannot run here), parsed by the
    real adapter. No `avg_spec_accept_length` before the first verify step (older builds)."""
    state = {} if accept_length is None else {"avg_spec_accept_length": accept_length}
    text = json.dumps({"version": "0.5.23", "internal_states": [state]})
    return adapter_for("sglang").parse_spec_metrics(text)


def _generated(tokens: list[int], warmup: bool = False, status: str = "ok") -> list[RequestRecord]:
    return [
        RequestRecord(
            index=i,
            prompt_index=i,
            status=status,
            warmup=warmup,
            completion_tokens=n if status == "ok" else None,
            chunk_times_s=[0.1] * n if status != "ok" else [],
        )
        for i, n in enumerate(tokens)
    ]


def test_sglang_running_means_differenced_give_the_runs_own_mean():
    """Warmup: 2 requests of 101 tokens, 200 from verify steps at 2.0 a step (100 steps). Run:
    10 requests of 301 tokens, 3000 from verify steps at 3.0 (1000 steps). The server's running
    mean at bench end is 3200/1100; the difference recovers 3.0."""
    records = _generated([101, 101], warmup=True) + _generated([301] * 10)
    spec = acceptance_from_server_info(_sglang_reading(2.0), _sglang_reading(3200 / 1100), records)
    assert spec["source"] == "server_info"
    assert spec["mean_acceptance_length"] == pytest.approx(3.0)
    assert spec["window"].startswith("measured run: the running means at warmup end and bench")
    assert spec["server_accept_length_warmup_end"] == 2.0
    assert spec["server_accept_length_bench_end"] == pytest.approx(3200 / 1100)


def test_sglang_running_mean_without_verify_steps_before_the_run_is_the_runs():
    records = _generated([1], warmup=True) + _generated([301] * 10)  # a 1-token warmup
    spec = acceptance_from_server_info(_sglang_reading(None), _sglang_reading(3.1), records)
    assert (spec["mean_acceptance_length"], spec["window"]) == (3.1, "measured run")


def test_sglang_running_mean_not_read_at_warmup_end_says_it_is_the_servers_lifetime():
    spec = acceptance_from_server_info(None, _sglang_reading(2.9), _generated([301]))
    assert spec["mean_acceptance_length"] == 2.9
    assert spec["window"].startswith("server lifetime, warmup included")
    assert acceptance_from_server_info(None, _sglang_reading(None), []) is None


def test_request_fields_count_the_completed_measured_requests_only():
    """SGLang's `sglext.spec_tokens_details` per response (STAND-IN events in SGLang's format),
    folded into records by the real SSE code; a warmup and a cancelled request do not count."""
    from workflow_scripts.loadgen.sse import apply_event

    def record(index, verify, correct, proposed, warmup=False, status="ok"):
        r = RequestRecord(index=index, prompt_index=index, warmup=warmup)
        apply_event(
            r,
            {
                "choices": [],
                "usage": {"prompt_tokens": 5, "completion_tokens": 40},
                "sglext": {
                    "spec_tokens_details": {
                        "spec_verify_ct": verify,
                        "spec_num_correct_drafts": correct,
                        "spec_num_proposed_drafts": proposed,
                        "spec_accept_length": 0.0,
                    }
                },
            },
            0.5,
        )
        r.status = status
        return r

    records = [
        record(0, 10, 20, 50),
        record(1, 10, 10, 50),
        record(2, 99, 0, 99, warmup=True),
        record(3, 99, 0, 99, status="incomplete"),
    ]
    assert records[0].spec_details["spec_verify_ct"] == 10
    spec = acceptance_from_request_fields(records)
    assert spec["source"] == "request_fields"
    assert spec["mean_acceptance_length"] == pytest.approx(1 + 30 / 20)
    assert spec["acceptance_rate"] == pytest.approx(30 / 100)
    assert (
        acceptance_from_request_fields([RequestRecord(index=0, prompt_index=0, status="ok")])
        is None
    )


def _drafter_cell(engine: dict, drafter: dict):
    from tests.support.engines import make_config, one_cell

    return one_cell(
        make_config(
            {"e": engine},
            [{"model": "m", "quant": "hub", "engine": "e", "workload": "w", "drafter": "d"}],
            drafters={"d": drafter},
        )
    )


def test_spec_result_prefers_per_response_fields_then_counters_then_the_running_mean():
    from workflow_scripts.cell.specdecode import spec_result

    cell = _drafter_cell(
        {"kind": "sglang", "launch": "native", "binary": "sglang"}, {"kind": "ngram", "n_max": 3}
    )
    records = _generated([101], warmup=True) + _generated([301] * 4)
    readings = {"before": _sglang_reading(2.0), "after": _sglang_reading(2.5)}
    assert spec_result(cell, readings, records)["source"] == "server_info"
    records[1].spec_details = {"spec_verify_ct": 100, "spec_num_correct_drafts": 200}
    assert spec_result(cell, readings, records)["source"] == "request_fields"
    records[1].spec_details = None
    llamacpp = _drafter_cell(
        {"kind": "llamacpp", "launch": "native", "binary": "x"},
        {"kind": "ngram-simple", "n_max": 3},
    )
    adapter = adapter_for("llamacpp")
    counters = {
        "before": adapter.parse_spec_metrics(LLAMACPP_BEFORE),
        "after": adapter.parse_spec_metrics(LLAMACPP_AFTER),
    }
    assert spec_result(llamacpp, counters, records)["source"] == "metrics"


def test_cap_cancellations_flag_counter_acceptance_and_give_the_completed_only_rate():
    """llama.cpp adds a request's drafts to its counters when the slot is released (finished or
    cancelled), so at the time cap the counter deltas and the completed requests part ways."""
    from workflow_scripts.cell.specdecode import spec_result

    cell = _drafter_cell(
        {"kind": "llamacpp", "launch": "native", "binary": "x"},
        {"kind": "ngram-simple", "n_max": 3},
    )
    adapter = adapter_for("llamacpp")
    counters = {
        "before": adapter.parse_spec_metrics(LLAMACPP_BEFORE),
        "after": adapter.parse_spec_metrics(LLAMACPP_AFTER),
    }
    done = [
        RequestRecord(
            index=i,
            prompt_index=i,
            status="ok",
            completion_tokens=16,
            timings={"draft_n": 10, "draft_n_accepted": a},
        )
        for i, a in enumerate((8, 6))
    ]
    spec = spec_result(cell, counters, done)
    assert spec["source"] == "metrics" and "cap_note" not in spec
    cancelled = [
        RequestRecord(index=5 + i, prompt_index=5 + i, status="incomplete") for i in range(3)
    ]
    spec = spec_result(cell, counters, done + cancelled)
    assert spec["acceptance_rate"] == pytest.approx(90 / 140)  # still the counters' figure
    assert spec["cap_note"].startswith("3 requests were cancelled at the time cap.")
    assert "acceptance rate is 0.700" in spec["cap_note"]  # (8 + 6) / 20, completed only
