"""A conversation replayed as one session: its turns in order, each sent once the last one was
answered and its think time passed. A turn that fails (an error, a cut-off stream, a timeout)
ends the conversation: no later turn is sent with a partial or empty answer as its history. The
time cap ends it too, before a turn the cap has passed (or that its think time would pass)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from .prompts import MODEL_HISTORY, Prompt
from .records import OK, RequestRecord
from .request import Link, prompt_sha256, request_body, run_request
from .settings import LoadSettings
from .wire import Endpoint


@dataclass(frozen=True)
class MeasuredRun:
    """What every worker and session of one measured run shares: the load, the server, the
    run's start and time cap on the monotonic clock (`deadline` None: no cap), the records it
    appends to and the call each record gets once it has ended."""

    spec: LoadSettings
    endpoint: Endpoint
    t0: float
    deadline: float | None
    records: list[RequestRecord]
    on_record: Callable[[RequestRecord], None]

    def past_cap(self, wait_s: float = 0.0) -> bool:
        """Whether the cap falls within `wait_s` from now: a turn sent then would be too late."""
        return self.deadline is not None and time.perf_counter() + wait_s >= self.deadline


async def converse(
    run: MeasuredRun,
    link: Link,
    prompt: Prompt,
    session: int,
    first_index: int,
    scheduled_s: float | None = None,
) -> bool:
    """Prompt `prompt`'s conversation as session `session` (its position in the run), its turns
    numbered on from record index `first_index`; `scheduled_s` the first turn's planned send
    time (None: a closed loop). False when the time cap ended it before a turn; True when it
    ended by itself: every turn answered, or a turn failed (its record says why)."""
    spec, talk = run.spec, prompt.conversation
    # `history: model` sends each answer's text on, so its turns keep it whatever the load
    # writes down; with `record_outputs` false it is dropped from the record once read.
    keeping = spec if spec.record_outputs else dataclasses.replace(spec, record_outputs=True)
    sending = keeping if talk.history == MODEL_HISTORY else spec
    answers: list[str] = []  # each answered turn's text as streamed ("" where none was kept)
    for turn in range(1, talk.turns + 1):
        think_s = talk.think_time_s if turn > 1 else 0.0
        if run.past_cap(think_s):  # no sleep through a think time the cap would end
            return False
        if think_s:
            await asyncio.sleep(think_s)
            if run.past_cap():
                return False
        record = RequestRecord(first_index + turn - 1, prompt.index, session=session, turn=turn)
        if turn == 1:  # a session starts at its arrival; its later turns wait for answers
            record.scheduled_s = scheduled_s
        run.records.append(record)
        body = request_body(spec, prompt.text, talk.messages_for(turn, answers))
        record.prompt_sha256 = prompt_sha256(body)
        request = run.endpoint.request(spec.path, body, spec.api_key)
        try:
            await run_request(link, sending, request, record, run.t0)
        finally:
            answer = record.output or ""
            if not spec.record_outputs:
                record.output = None
        run.on_record(record)
        if record.status != OK:
            return True
        answers.append(answer)
    return True
