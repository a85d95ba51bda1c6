"""The law stand-in's prefix cache (`fixtures/sweeps/law_server.py`) against its closed form
(`fixtures/sweeps/law.py`), read through the project's REAL load client and the REAL llama.cpp
adapter's `prefix_cache_hit_pct`.

The server is a STAND-IN: no real server's prefix cache reuses a known number of tokens in a
known time, and a hit rate or a TTFT by turn needs exact references. Each slot keeps its last
prompt's tokens; a request reuses the longest common prefix with the prompt kept in the slot it
takes, and its prefill is P + P1 * the tokens left to evaluate. Started directly with the flags
the pipeline renders from engine settings (`Law.argv`; the shared server's cache-off settings
from the adapter's own `prefix_cache_off`), readied with the pipeline's own probe, torn down.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator

import pytest

from tests.fixtures.sweeps.law import SERVER, Law, Reuse, chat_text, hit_pct
from tests.support.engines import left_behind
from workflow_scripts.engines import adapter_for
from workflow_scripts.engines.base import flag_args
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.loadgen.records import OK, RequestRecord
from workflow_scripts.process.ports import free_port
from workflow_scripts.process.server import ServerProcess, running, wait_ready

pytestmark = pytest.mark.standin

# step(1) = 10 ms; prefill 5 + 2 ms per evaluated token: a 23-token first turn takes 6 steps,
# a later turn with 6 tokens to evaluate 2, the same turn without the cache 7 or 8 (no
# prefill lands on a step's end, so float rounding cannot move a first token by a step).
CACHED = Law(
    step_ms=8, step_per_stream_ms=2, prefill_ms=5, prefill_per_token_ms=2, prefix_cache=True
)
PLAIN = dataclasses.replace(CACHED, prefix_cache=False)  # the cache not asked for
MAX_TOKENS = 4
SLOTS = 2
# Measured TTFT (client send to first chunk) may trail the law's by the HTTP round trip and the
# loop's wake-up on a shared machine, never lead it: within [-1, +25] ms, while a cached turn's
# TTFT and the same turn's uncached one are 50 ms or more apart.
EARLY_MS, LATE_MS = 1.0, 25.0
PROBE = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}  # cell/run.py's


def conversation(name: str, turns: int = 3) -> list[str]:
    """Turn t's prompt extends turn t - 1's by five words (a client resending the history)."""
    words = [f"{name}{i}" for i in range(20 + 5 * (turns - 1))]
    return [" ".join(words[: 20 + 5 * t]) for t in range(turns)]


# two conversations interleaved, sent one at a time: each turn should find its own slot
TEXTS = [text for pair in zip(conversation("a"), conversation("b"), strict=True) for text in pair]
PROMPTS = [Prompt(i, text) for i, text in enumerate(TEXTS)]


@contextlib.contextmanager
def law_server(law: Law, extra: list[str], log_dir) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, str(SERVER), *law.argv(), *extra]
    argv += ["--port", str(port), "--parallel", str(SLOTS), "-c", "8192"]
    server = ServerProcess(argv, log_dir / f"law-cache-{port}.log")
    with running(server):  # torn down (its whole process group) whatever happens inside
        url = f"http://127.0.0.1:{port}"
        wait_ready(server, url, "/health", 30, PROBE)
        yield url
    # this server's own processes only: other runs may have law stand-ins of their own up
    assert left_behind(f"{SERVER} {' '.join(argv[2:])}") == []


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """The cache on; the cache asked for but turned off by the settings a sweep's shared server
    runs under (the llama.cpp adapter's `prefix_cache_off`); the cache not asked for."""
    log_dir = tmp_path_factory.mktemp("law-cache")
    off = flag_args(adapter_for("llamacpp").prefix_cache_off)
    assert "--no-cache-prompt" in off  # what turns the stand-in's cache off
    with (
        law_server(CACHED, [], log_dir) as on,
        law_server(CACHED, off, log_dir) as turned_off,
        law_server(PLAIN, [], log_dir) as plain,
    ):
        yield {"on": on, "off": turned_off, "plain": plain}


def records(url: str) -> list[RequestRecord]:
    """The prompts sent one at a time (a closed loop of 1), in order."""
    spec = LoadSettings(base_url=url, concurrency=1, max_tokens=MAX_TOKENS, warmup_requests=0)
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    assert [r.status for r in load.records] == [OK] * len(PROMPTS)
    assert [r.prompt_index for r in load.records] == list(range(len(PROMPTS)))
    return load.records


def sent(law: Law, on: bool | None = None) -> list[Reuse]:
    """The closed form for the prompts as the server tokenizes them (the load client's one user
    message each), after the readiness probe that took a slot first."""
    texts = [chat_text([PROBE["messages"][0]["content"]])] + [chat_text([t]) for t in TEXTS]
    return law.prompt_cache(texts, slots=SLOTS, on=on)[1:]


def check_ttft(law: Law, found: list[RequestRecord], reuses: list[Reuse]) -> None:
    """Each request's prefill (`prompt_ms`, exact) and TTFT (within the tolerance) are the
    law's for its evaluated tokens."""
    for record, reuse in zip(found, reuses, strict=True):
        assert record.timings["prompt_n"] == reuse.prompt_n
        assert record.timings["prompt_ms"] == pytest.approx(
            law.prefill_time_ms(reuse.prompt_n), abs=1e-6
        )
        expected = law.ttft_ms(1, uncached=reuse.prompt_n)
        assert expected - EARLY_MS <= record.ttft_s * 1000.0 <= expected + LATE_MS, (
            record.prompt_index,
            record.ttft_s,
            expected,
        )


def test_each_turn_reuses_its_conversations_prefix_and_the_hit_rate_is_the_closed_form(servers):
    """cache_n / prompt_n of every turn are law.py's (each conversation keeps its own slot),
    each TTFT is the law's for the tokens left to evaluate, and the adapter's hit rate over the
    records is `hit_pct` of the closed form."""
    reuses = sent(CACHED)
    # the reference itself: a first turn shares only the template's head (BOS, "<|user|>") with
    # the slot's last prompt; a later turn all of its conversation's last one but "<|assistant|>"
    assert all(r.cache_n <= 2 for r in reuses[:2])
    for turn, before in zip(reuses[2:], reuses, strict=False):
        assert turn.cache_n == before.cache_n + before.prompt_n - 1
    one_slot = CACHED.prompt_cache([chat_text([t]) for t in TEXTS], slots=1)
    assert hit_pct(one_slot) < hit_pct(reuses)  # the slot choice matters to what is checked
    found = records(servers["on"])
    assert [(r.timings["cache_n"], r.timings["prompt_n"]) for r in found] == [
        (r.cache_n, r.prompt_n) for r in reuses
    ]
    check_ttft(CACHED, found, reuses)
    assert CACHED.ttft_ms(1, uncached=reuses[2].prompt_n) + LATE_MS < CACHED.ttft_ms(
        1, uncached=reuses[2].cache_n + reuses[2].prompt_n
    )  # a cached turn's TTFT is told from its uncached one's
    adapter = adapter_for("llamacpp")
    assert adapter.prefix_cache_hit_pct(found, None, None) == pytest.approx(hit_pct(reuses))
    assert 0 < hit_pct(reuses) < 100


def test_the_shared_servers_settings_turn_the_cache_off(servers):
    """Under `--no-cache-prompt --cache-ram 0` every prompt is evaluated whole: cache_n 0, the
    adapter's hit rate 0, each TTFT the law's for the whole prompt."""
    reuses = sent(CACHED, on=False)
    assert all(r.cache_n == 0 for r in reuses)
    found = records(servers["off"])
    assert [r.timings["cache_n"] for r in found] == [0] * len(found)
    check_ttft(CACHED, found, reuses)
    assert adapter_for("llamacpp").prefix_cache_hit_pct(found, None, None) == 0.0
    assert hit_pct(reuses) == 0.0


def test_without_the_cache_asked_for_the_timings_are_as_before(servers):
    """No `law_prefix_cache`: no `cache_n` in the timings (the adapter reports no rate), every
    prompt token evaluated."""
    found = records(servers["plain"])
    assert all("cache_n" not in r.timings for r in found)
    check_ttft(PLAIN, found, sent(PLAIN))
    assert adapter_for("llamacpp").prefix_cache_hit_pct(found, None, None) is None
    assert "law_prefix_cache" not in PLAIN.settings() and "--law-prefix-cache" in CACHED.argv()
