"""The law stand-in's answers (`fixtures/sweeps/law_server.py`) against their closed form
(`fixtures/sweeps/law.py`), read through the project's REAL load client into the records'
`output`.

The server is a STAND-IN: no real server's greedy outputs are known in advance, nor which of
them a drafter changes, nor how often two runs of one configuration disagree, and output
fidelity needs exact references. Its answer to a prompt is a word a token drawn from the
prompt's hash; with a drafter the prompts a hash picks (a share S) differ from token K on; with
noise the prompts another hash picks (a share Q) vary from run to run. Started directly with
the flags the pipeline renders from engine settings (`Law.argv`), readied with the pipeline's
own probe, torn down.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator

import pytest
import requests

from tests.fixtures.sweeps.law import SERVER, Law
from tests.support.engines import left_behind
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.loadgen.records import OK
from workflow_scripts.process.ports import free_port
from workflow_scripts.process.server import ServerProcess, running, wait_ready

pytestmark = pytest.mark.standin

# Fast steps (the latency law is test_law_server.py's business); a drafter that gives up to 3
# tokens a chunk, so a chunk's text starts mid-answer; half the prompts altered from token 3.
ALTERED = Law(
    step_ms=1,
    step_per_stream_ms=0.1,
    draft_accept=3,
    draft_max=2,
    alter_share=0.5,
    alter_after=3,
)
NOISY = Law(step_ms=1, step_per_stream_ms=0.1, alter_after=2, noise_share=0.3)
MAX_TOKENS = 8
PROMPTS = [Prompt(i, f"prompt {i}: a few words about the sea") for i in range(40)]
NOISE_PROMPTS = [Prompt(i, f"noise {i}") for i in range(300)]
PROBE = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}  # cell/run.py's
SIGMAS = 4.5  # a binomial count outside mean ± 4.5 sd (+ 1): about 7 in a million by chance


@contextlib.contextmanager
def law_server(law: Law, drafter: bool, log_dir) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, str(SERVER), *law.argv(drafter)]
    argv += ["--port", str(port), "--parallel", "8", "-c", "8192"]
    server = ServerProcess(argv, log_dir / f"law-{drafter}-{port}.log")
    with running(server):  # torn down (its whole process group) whatever happens inside
        url = f"http://127.0.0.1:{port}"
        wait_ready(server, url, "/health", 30, PROBE)
        yield url


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """The altering law with and without the drafter, and the noisy law without one."""
    log_dir = tmp_path_factory.mktemp("law-outputs")
    with (
        law_server(ALTERED, False, log_dir) as base,
        law_server(ALTERED, True, log_dir) as draft,
        law_server(NOISY, False, log_dir) as noisy,
    ):
        yield {"base": base, "draft": draft, "noisy": noisy}
    assert left_behind(str(SERVER)) == []


def outputs(url: str, prompts: list[Prompt], endpoint: str = "chat") -> dict[str, str]:
    """Each prompt's answer as the load client recorded it."""
    spec = LoadSettings(
        base_url=url, concurrency=8, max_tokens=MAX_TOKENS, warmup_requests=1, endpoint=endpoint
    )
    load = run_load(spec, prompts, RunOptions(progress=False))
    records = [r for r in load.records if not r.warmup]
    assert [r.status for r in records] == [OK] * len(prompts)
    assert all(r.finish_reason == "length" for r in records)
    return {prompts[r.prompt_index].text: r.output for r in records}


def first_difference(a: str, b: str) -> int | None:
    """The first character at which two texts differ (None: identical)."""
    if a == b:
        return None
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def within_binomial(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= SIGMAS * math.sqrt(n * p * (1 - p)) + 1


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_without_a_drafter_every_answer_is_the_prompts_own(servers, endpoint):
    """The same text for a prompt every time, the law's, whatever the share S the drafter would
    alter; distinct prompts, distinct answers."""
    texts = [p.text for p in PROMPTS]
    first = outputs(servers["base"], PROMPTS, endpoint)
    assert first == {t: ALTERED.answer(t, MAX_TOKENS) for t in texts}
    assert outputs(servers["base"], PROMPTS, endpoint) == first
    assert len(set(first.values())) == len(texts)
    assert all(len(text.split()) == MAX_TOKENS for text in first.values())


def test_the_drafter_alters_exactly_the_predicted_prompts_from_the_predicted_character(servers):
    """The drafter's answers are the law's; against the base's, they differ on exactly the
    prompts `altered` names, each first at `first_divergence` (the first K tokens' length), and
    the identical count is `identical_count`."""
    texts = [p.text for p in PROMPTS]
    predicted = {t for t in texts if ALTERED.altered(t, MAX_TOKENS)}
    assert 0 < len(predicted) < len(texts)  # the check below can see both kinds
    base, draft = outputs(servers["base"], PROMPTS), outputs(servers["draft"], PROMPTS)
    assert draft == {t: ALTERED.answer(t, MAX_TOKENS, drafter=True) for t in texts}
    assert {t for t in texts if draft[t] != base[t]} == predicted
    for t in texts:
        assert first_difference(base[t], draft[t]) == ALTERED.first_divergence(t, MAX_TOKENS)
    identical = sum(draft[t] == base[t] for t in texts)
    assert identical == ALTERED.identical_count(texts, MAX_TOKENS)
    assert ALTERED.expected_identical(texts, MAX_TOKENS) == identical  # no noise: exact
    assert outputs(servers["draft"], PROMPTS) == draft  # the alteration is not noise


def test_a_non_streamed_answer_is_the_same_text(servers):
    """Chat and completions, answered in one piece: the law's text for the prompt (one the
    drafter alters)."""
    prompt = next(p.text for p in PROMPTS if ALTERED.altered(p.text, MAX_TOKENS))
    for path, body, read in (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}, "message"),
        ("/v1/completions", {"prompt": prompt}, "text"),
    ):
        answer = requests.post(
            servers["draft"] + path, json={**body, "max_tokens": MAX_TOKENS}, timeout=30
        ).json()["choices"][0]
        text = answer["message"]["content"] if read == "message" else answer["text"]
        assert text == ALTERED.answer(prompt, MAX_TOKENS, drafter=True)


def test_noise_alters_the_noisy_prompts_anew_each_time_and_the_floor_is_exact(servers):
    """The answers to the noisy prompts (a share Q chosen by hash) are altered from token K on,
    each with a nonce of its own; every other answer is the law's. So two runs of one
    configuration agree exactly on the prompts that are not noisy: the floor's count."""
    texts = [p.text for p in NOISE_PROMPTS]
    runs = [outputs(servers["noisy"], NOISE_PROMPTS) for _ in range(2)]
    noised = []
    for run in runs:
        for t in texts:
            clean = NOISY.answer(t, MAX_TOKENS)
            assert (run[t] != clean) == NOISY.noisy(t, MAX_TOKENS), t
            if run[t] != clean:
                at = NOISY.prefix_chars(t)
                assert first_difference(run[t], clean) == at and run[t][at] == "\t", run[t]
                noised.append(run[t])
    assert len(set(noised)) == len(noised)  # every altered text carries its own nonce
    noisy = sum(NOISY.noisy(t, MAX_TOKENS) for t in texts)
    assert within_binomial(noisy, len(texts), NOISY.noise_share), noisy  # the hash's share
    identical = sum(runs[0][t] == runs[1][t] for t in texts)
    assert identical == NOISY.expected_identical(texts, MAX_TOKENS, (False, False))
    assert identical == len(texts) - noisy


def test_an_alteration_past_the_last_token_alters_nothing():
    """K >= max_tokens: no prompt is altered, and the floor is 1."""
    late = Law(alter_share=1.0, alter_after=MAX_TOKENS, noise_share=0.5)
    texts = [p.text for p in PROMPTS]
    assert late.identical_count(texts, MAX_TOKENS) == len(texts)
    assert late.expected_identical(texts, MAX_TOKENS, (False, False)) == len(texts)  # floor 1
    assert all(late.first_divergence(t, MAX_TOKENS) is None for t in texts)
    assert ALTERED.identical_count(texts, MAX_TOKENS) < len(texts)  # the control: K < max


def test_the_noisy_texts_differ_between_starts(tmp_path):
    """Two starts of the noisy law alter the same prompts (their hash says which) with texts
    of their own: the nonces come from os.urandom, nothing the runs share."""
    prompts = NOISE_PROMPTS[:60]
    starts = []
    for _ in range(2):
        with law_server(NOISY, False, tmp_path) as url:
            run = outputs(url, prompts)
        starts.append({t: text for t, text in run.items() if text != NOISY.answer(t, MAX_TOKENS)})
    assert starts[0] and starts[0].keys() == starts[1].keys()
    assert all(starts[0][t] != starts[1][t] for t in starts[0])
