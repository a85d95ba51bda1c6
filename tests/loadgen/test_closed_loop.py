"""The measured run's pieces on hand-made prompts, no server: each position's first record
index (a conversation's turns number on), and the wait for a planned send time that the time
cap ends without sleeping."""

from __future__ import annotations

import asyncio
import time

from workflow_scripts.loadgen.closed_loop import first_indices, on_time
from workflow_scripts.loadgen.prompts import Conversation, Prompt
from workflow_scripts.loadgen.sessions import MeasuredRun
from workflow_scripts.loadgen.settings import LoadSettings
from workflow_scripts.loadgen.wire import Endpoint


def talk(turns: int) -> Conversation:
    said = [(role, f"{role} {t}") for t in range(turns) for role in ("user", "assistant")]
    return Conversation(tuple(said[:-1]))


def test_each_position_numbers_its_records_on_from_the_turns_before_it():
    prompts = [
        Prompt(0, "a"),
        Prompt(1, "b", conversation=talk(3)),
        Prompt(2, "c", conversation=talk(2)),
        Prompt(3, "d"),
    ]
    assert [p.requests for p in prompts] == [1, 3, 2, 1]
    assert first_indices(prompts) == [0, 1, 4, 6]
    assert first_indices([]) == [0]


def run_at(deadline_in_s: float | None) -> MeasuredRun:
    spec = LoadSettings(base_url="http://127.0.0.1:9", concurrency=1, max_tokens=1)
    t0 = time.perf_counter()
    deadline = None if deadline_in_s is None else t0 + deadline_in_s
    return MeasuredRun(spec, Endpoint.from_base_url(spec.base_url), t0, deadline, [], print)


def test_a_send_time_at_or_past_the_cap_is_refused_before_any_wait():
    """A planned time an hour away with the cap at ten minutes: refused at once (no sleep
    through it: the call would not return otherwise), and nothing is appended."""
    run = run_at(600.0)
    assert asyncio.run(on_time(run, 3600.0)) is False
    assert asyncio.run(on_time(run, 600.0)) is False
    assert asyncio.run(on_time(run, 0.0)) is True
    assert asyncio.run(on_time(run_at(None), None)) is True
    assert asyncio.run(on_time(run_at(-1.0), None)) is False  # the cap already passed
    assert run.records == []
