"""One record per request: the raw truth every figure is computed from."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

OK = "ok"
ERROR = "error"
INCOMPLETE = "incomplete"


@dataclass
class RequestRecord:
    """Times are seconds; `sent_s` and `scheduled_s` (the planned send time of scheduled arrivals,
    None for a closed loop) are relative to the run's start, the rest to `sent_s`.
    `output`: the answer's text (its streamed `content`, never `reasoning_content`), set once the
    answer ended, whole or cut short by an error; None while it has not, or when the load keeps
    no text (`record_outputs` false)."""

    index: int
    prompt_index: int
    status: str = INCOMPLETE
    warmup: bool = False
    sent_s: float = 0.0
    scheduled_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    token_count_source: str = "usage"
    error: str | None = None
    error_detail: str | None = None
    http_status: int | None = None
    retries: int = 0
    finish_reason: str | None = None
    output: str | None = None
    timings: dict[str, Any] | None = None  # llama.cpp's per-response timings
    spec_details: dict[str, Any] | None = None  # SGLang's sglext.spec_tokens_details
    session: int | None = None  # a conversation's position in the run; None outside them
    turn: int | None = None  # its turn, from 1; None outside conversations

    @property
    def content_chunks(self) -> int:
        return len(self.chunk_times_s)

    @property
    def pair_key(self) -> tuple[int, int]:
        """What two runs' requests are paired by: the prompt, and a conversation's turn (0
        outside one): turn k of a conversation is one request in every run."""
        return (self.prompt_index, self.turn or 0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        if data.keys() <= cls.__dataclass_fields__.keys():  # as written: no key to drop
            return cls(**data)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def read_records(path: str | Path) -> list[RequestRecord]:
    """A requests.jsonl file's records, in the order they were written."""
    lines = Path(path).read_text().splitlines()
    return [RequestRecord.from_dict(json.loads(line)) for line in lines if line.strip()]
