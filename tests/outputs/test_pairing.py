"""Two runs' requests pair only when their prompt text was the same (records.pair_requests, the
one pairing every comparison uses): each request record carries the digest of the prompt as
sent (`prompt_sha256`), and requests of one prompt index and turn sent as other texts are left
out and counted, in fidelity.csv/md, the card, comparisons' basis and flags and the spec gain's
source. Hand-made records: the two cases are an engine that fits a trace's prompts in its own
tokens against one that keeps the text, and a prefix-cache pair of conversations whose later
turns carried the model's own, different answers (`history: model`)."""

from __future__ import annotations

import dataclasses
import hashlib
import statistics

import numpy as np
import pytest

from tests.outputs.test_stats import simulate_run
from tests.support.config import default_config
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.fidelity.agreement import compare_outputs, judge_pair
from workflow_scripts.fidelity.pairs import FidelitySettings, floor_id
from workflow_scripts.loadgen.records import ERROR, OK, RequestRecord, pair_requests
from workflow_scripts.outputs import cell_pairs
from workflow_scripts.outputs.changes import PAIRED_PROMPTS, cell_changes
from workflow_scripts.outputs.fidelity.table import fidelity_table, fidelity_view
from workflow_scripts.outputs.spec_gain import common_subset_figures, paired_gain_columns

LLAMA = "smollm2-135m__llamacpp-cpu__f16__none__c4"
VLLM = "smollm2-135m__vllm-cpu__bf16__none__c4"
N, REFITTED = 8, 6  # llama.cpp fitted prompts 0..5 of the trace in its own tokens


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def answer(text: str) -> str:
    """An identical greedy engine: its answer a function of the prompt text alone."""
    return f"the answer to <{text}>"


def trace_run(texts: list[str], digests: bool = True) -> list[dict]:
    """A run's requests.jsonl lines: prompt i sent as texts[i], answered by `answer`."""
    out = [{"prompt_index": -1, "status": OK, "warmup": True, "output": "warm"}]
    for i, text in enumerate(texts):
        line = {"prompt_index": i, "status": OK, "warmup": False, "output": answer(text)}
        if digests:
            line["prompt_sha256"] = sha(text)
        out.append(line)
    return out


def engine_pair(digests: bool = True) -> tuple[list[dict], list[dict]]:
    """vLLM keeps the trace's text; llama.cpp sent prompts 0..5 cut to fit its own tokens."""
    kept = [f"trace request {i} " + "word " * 40 for i in range(N)]
    fitted = [t[:60] if i < REFITTED else t for i, t in enumerate(kept)]
    return trace_run(fitted, digests), trace_run(kept, digests)


def test_the_same_index_sent_as_other_text_is_not_paired_and_counted():
    llama, vllm = engine_pair()
    pairing = pair_requests(vllm, llama)
    assert pairing.unpaired == REFITTED
    assert [a["prompt_index"] for a, _ in pairing.pairs] == [6, 7]
    assert pairing.keys == {(6, 0), (7, 0)}
    got = compare_outputs(vllm, llama)
    assert (got.prompts_compared, got.identical, got.unpaired) == (2, 2, REFITTED)
    # records written before the digest pair on the prompt and turn alone, as before
    old_llama, old_vllm = engine_pair(digests=False)
    assert compare_outputs(old_vllm, old_llama).prompts_compared == N
    mixed = pair_requests(old_vllm, llama)  # one side without the digest: the key decides
    assert (len(mixed.pairs), mixed.unpaired) == (N, 0)


def test_nothing_paired_gives_no_verdict_and_says_why():
    llama, vllm = engine_pair()
    everything = [
        {**r, "prompt_sha256": sha(f"other {r['prompt_index']}")} if not r["warmup"] else r
        for r in vllm
    ]
    got = compare_outputs(everything, llama)
    assert (got.prompts_compared, got.unpaired) == (0, N)
    judged = judge_pair(got, compare_outputs(llama, llama))
    assert judged.verdict == "unresolved"
    assert judged.reason == f"no prompt paired: the {N} both answered were sent as other texts"


def test_fidelity_calls_an_identical_engine_no_change_on_the_prompts_it_shares():
    """The engine pair in fidelity.csv/md: 2 prompts compared, both identical, 6 not paired;
    before, the 8 were matched by index, 2 of 8 identical against a floor of 8 of 8: `changed`."""
    config = validate_config(default_config())
    cells = build_cells(config)
    llama, vllm = engine_pair()
    records = {LLAMA: llama, floor_id(LLAMA): llama, VLLM: vllm}
    metrics = [{"cell": cell, "status": "done", "decode_tok_s": 10.0} for cell in records]
    table = fidelity_table(cells, metrics, records, {}, FidelitySettings.of_config(config))
    row = table.set_index("cell").loc[VLLM]
    assert (row["kind"], row["reference_cell"]) == ("engine", LLAMA)
    assert (row["prompts_compared"], row["unpaired"], row["identical_pct"]) == (2, REFITTED, 100.0)
    assert row["verdict"] != "changed"
    shown = fidelity_view(table).set_index("cell").loc[VLLM]
    assert shown["prompts"] == f"2 ({REFITTED} not paired)"


# --- a prefix-cache pair of conversations, history: model ---------------------------------

SESSIONS, TURNS = 5, 3
DIVERGED = {0, 1}  # conversations whose turn-1 answer differed: their turns 2 and 3 differ


def conversation_run(seed: int, cache: bool) -> list[RequestRecord]:
    """Five conversations of three turns; each turn's digest is that of the history it carried:
    the same for both cells, except the later turns of the conversations in DIVERGED."""
    timed = simulate_run(np.random.default_rng(seed), n=SESSIONS * TURNS)
    out = []
    for index, record in enumerate(timed):
        session, turn = divmod(index, TURNS)
        turn += 1
        own = cache and session in DIVERGED and turn > 1
        sent = f"conversation {session} turn {turn}" + (" after another answer" if own else "")
        out.append(
            dataclasses.replace(
                record,
                prompt_index=session,
                session=session,
                turn=turn,
                prompt_sha256=sha(sent),
            )
        )
    return out


PAIRED = SESSIONS * TURNS - len(DIVERGED) * (TURNS - 1)  # 11


def paired_median_change(a: list[RequestRecord], b: list[RequestRecord]) -> float:
    """B's TTFT median against A's over the pairs alone, computed here."""
    same = {(r.prompt_index, r.turn) for r in a if (r.session not in DIVERGED or r.turn == 1)}

    def median(run: list[RequestRecord]) -> float:
        return statistics.median(r.ttft_s for r in run if (r.prompt_index, r.turn) in same)

    return 100 * (median(b) / median(a) - 1)


def test_a_prefix_cache_pair_leaves_out_turns_that_carried_other_answers():
    on, off = conversation_run(1, cache=True), conversation_run(2, cache=False)
    pairing = pair_requests(on, off)
    assert (len(pairing.pairs), pairing.unpaired) == (PAIRED, len(DIVERGED) * (TURNS - 1))
    found = cell_changes([], [], on, off, cell_pairs.FIGURES)
    assert found.method == PAIRED_PROMPTS
    assert found.basis == f"{PAIRED} prompts, 4 not paired (sent as other texts)"
    ttft = found.changes["ttft_median_ms"]
    assert ttft.common_prompts == PAIRED and ttft.unpaired == 4
    assert ttft.change_pct == pytest.approx(paired_median_change(on, off), rel=1e-9)


def test_comparisons_say_how_many_were_not_paired():
    on, off = conversation_run(1, cache=True), conversation_run(2, cache=False)
    a = {"cell": "m__cache__q__none__talk", "engine": "cache", "quant": "q", "drafter": "none"}
    b = {**a, "cell": "m__nocache__q__none__talk", "engine": "nocache"}
    for m in (a, b):
        m.update(model="m", workload="talk", status="done")
    rows = cell_pairs.pair_rows(cell_pairs.Pair(cell_pairs.ENGINE, a, b), on, off)
    assert {row["interval_basis"] for row in rows} == {
        f"{PAIRED} prompts, 4 not paired (sent as other texts)"
    }
    flags = rows[0]["flags"]
    assert "4 prompts not paired: both completed them, sent as other texts" in flags
    assert "different prompts completed" not in flags  # each completed all 15
    # a failed request is not completed: neither paired nor counted as not paired
    on[0] = dataclasses.replace(on[0], status=ERROR)  # conversation 0's turn 1: it paired
    on[1] = dataclasses.replace(on[1], status=ERROR)  # its turn 2: it was not paired
    again = pair_requests(on, off)
    assert (len(again.pairs), again.unpaired) == (PAIRED - 1, 3)


def test_the_spec_gain_figures_rest_on_the_pairs_and_say_the_rest():
    base, drafter = conversation_run(3, cache=False), conversation_run(4, cache=True)
    source = paired_gain_columns(base, drafter)["gain_interval_source"]
    assert source == f"paired randomization, {PAIRED} prompts, 4 not paired (sent as other texts)"
    common = common_subset_figures(base, drafter)
    assert common["common_prompts"] == PAIRED  # each completed all 15, 11 paired
