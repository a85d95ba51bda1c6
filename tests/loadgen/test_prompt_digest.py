"""Each request record carries the sha256 of its prompt exactly as sent (`prompt_sha256`): a
completion's text, a chat's messages with a conversation turn's history. Against the law
STAND-IN (tests/fixtures/sweeps/law_server.py), whose answers are a known function of the
messages, so the history each turn carried, and hence its digest, is known in closed form
(test_conversation_history's helpers)."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.fixtures.sweeps.law import SERVER
from tests.loadgen.test_conversation_history import (
    FAST,
    HUMAN_TURNS,
    MAX_TOKENS,
    dataset_contents,
    law_chain,
    own_contents,
    sharegpt,  # noqa: F401 (a fixture)
    spec,
)
from tests.loadgen.test_law_outputs import law_server
from tests.support.engines import left_behind
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.datasets import load_dataset
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.loadgen.records import OK, pair_requests

pytestmark = pytest.mark.standin


def digest(sent) -> str:
    """sha256 of the canonical JSON of what the body carried (its messages, or its prompt)."""
    text = json.dumps(sent, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chat(contents: list[str]) -> list[dict[str, str]]:
    roles = ["user", "assistant"] * len(contents)
    return [{"role": role, "content": c} for role, c in zip(roles, contents, strict=False)]


def dataset_chat(i: int, turn: int) -> list[dict[str, str]]:
    """Turn `turn`'s messages with the dataset's answers, the empty first one left out (so its
    first two messages are the user's): `dataset_contents` with their roles."""
    contents = dataset_contents(i, turn)
    roles = ["user"] + (["user"] if turn > 1 else []) + ["assistant", "user"] * max(0, turn - 2)
    return [{"role": role, "content": c} for role, c in zip(roles, contents, strict=True)]


def load(url: str, prompts: list[Prompt], **settings) -> list:
    run = LoadSettings(base_url=url, concurrency=2, max_tokens=MAX_TOKENS, **settings)
    records = run_load(run, prompts, RunOptions(progress=False)).records
    measured = [r for r in records if not r.warmup]
    assert measured and all(r.status == OK for r in measured)
    return measured


def test_each_record_carries_the_digest_of_what_it_sent(sharegpt, tmp_path):  # noqa: F811
    plain = [Prompt(i, f"prompt {i}: a few words about the sea ☂") for i in range(4)]
    model = load_dataset(spec(sharegpt, history="model"), 4).prompts
    dataset = load_dataset(spec(sharegpt), 4).prompts
    with law_server(FAST, False, tmp_path) as url:
        as_chat = load(url, plain)
        as_text = load(url, plain, endpoint="completions")
        own = load(url, model)
        given = load(url, dataset)
    assert left_behind(str(SERVER)) == []
    for r in as_chat:
        assert r.prompt_sha256 == digest(chat([plain[r.prompt_index].text]))
    for r in as_text:
        assert r.prompt_sha256 == digest(plain[r.prompt_index].text)
    for r in own:
        i = r.prompt_index
        chain = law_chain(i, HUMAN_TURNS[i])
        assert r.prompt_sha256 == digest(chat(own_contents(i, r.turn, chain))), (i, r.turn)
    for r in given:
        assert r.prompt_sha256 == digest(dataset_chat(r.prompt_index, r.turn))
    # the model's own answers as history: the later turns were other texts, left out of a pair
    pairing = pair_requests(own, given)
    later = sum(n - 1 for n in HUMAN_TURNS)
    assert (len(pairing.pairs), pairing.unpaired) == (len(HUMAN_TURNS), later)
    assert {turn for _, turn in pairing.keys} == {1}
