"""One record per request: the raw truth every figure is computed from."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
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
    prompt_sha256: str | None = None  # the prompt as sent (request.prompt_sha256); None: older

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


SendKey = tuple[int, int, int]  # (prompt, turn or 0, k): a prompt's (and turn's) k-th send


def _field(record: RequestRecord | Mapping[str, Any], name: str) -> Any:
    """A field of a record as read (RequestRecord) or as a requests.jsonl line (a mapping)."""
    if isinstance(record, Mapping):
        return record.get(name)
    return getattr(record, name)


def measured_sends(records: Iterable[Any]) -> dict[SendKey, Any]:
    """(prompt, turn or 0, k) -> the k-th measured send of that prompt and turn. Sends count in
    the order written (requests.jsonl is in send order), failed ones too, so a failed send never
    shifts the sends after it."""
    seen: Counter[tuple[int, int]] = Counter()
    out = {}
    for record in records:
        if _field(record, "warmup"):
            continue
        key = (_field(record, "prompt_index"), _field(record, "turn") or 0)
        out[(*key, seen[key])] = record
        seen[key] += 1
    return out


@dataclass(frozen=True)
class Pairing:
    """Two runs' completed measured requests matched one to one (`pairs`: (a's, b's) in key
    order), and how many matched by key but were not paired: their prompt texts differ."""

    pairs: tuple[tuple[Any, Any], ...]
    unpaired: int = 0

    @property
    def keys(self) -> set[tuple[int, int]]:
        """The pair keys (`RequestRecord.pair_key`) of the pairs."""
        return {(_field(a, "prompt_index"), _field(a, "turn") or 0) for a, _ in self.pairs}


def pair_requests(records_a: Iterable[Any], records_b: Iterable[Any]) -> Pairing:
    """The one way two runs' requests are paired (records as read or as requests.jsonl lines):
    both complete and measured, the same prompt and conversation turn (`pair_key`), the k-th send
    with the k-th, and the same prompt text as sent (`prompt_sha256`). A record written before
    the digest pairs on the key alone. Same key, other text (`unpaired`): an engine that fitted a
    trace's prompts in its own tokens, or a later turn carrying the model's own other answer."""
    a, b = measured_sends(records_a), measured_sends(records_b)
    pairs, unpaired = [], 0
    for key in sorted(a.keys() & b.keys()):
        mine, theirs = a[key], b[key]
        if _field(mine, "status") != OK or _field(theirs, "status") != OK:
            continue
        digests = (_field(mine, "prompt_sha256"), _field(theirs, "prompt_sha256"))
        if None not in digests and digests[0] != digests[1]:
            unpaired += 1
            continue
        pairs.append((mine, theirs))
    return Pairing(tuple(pairs), unpaired)


def read_records(path: str | Path) -> list[RequestRecord]:
    """A requests.jsonl file's records, in the order they were written."""
    lines = Path(path).read_text().splitlines()
    return [RequestRecord.from_dict(json.loads(line)) for line in lines if line.strip()]
