"""What a load is asked to do: the settings every part of the load generator reads, kept apart
so the request, worker and process modules need not import the entry point."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .wire import Endpoint


@dataclass(frozen=True)
class LoadSettings:
    """How to load a server. `api_key` is sent as a header and never written anywhere;
    `record_outputs` false keeps every record's `output` null (the answers' text unkept)."""

    base_url: str
    concurrency: int
    max_tokens: int
    model: str | None = None
    endpoint: str = "chat"
    temperature: float = 0.0
    ignore_eos: bool = False
    request_rate: float | None = None
    max_seconds: float | None = None
    grace_s: float = 30.0
    warmup_requests: int = 1
    request_timeout_s: float = 600.0
    arrival_seed: int = 0
    processes: int | None = None  # None: chosen from the expected chunk rate
    api_key: str | None = field(default=None, repr=False)
    extra_body: dict[str, Any] = field(default_factory=dict)
    record_outputs: bool = True

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"

    @property
    def url(self) -> str:
        ep = Endpoint.from_base_url(self.base_url)
        return f"{ep.scheme}://{ep.host_header}{ep.prefix}{self.path}"

    def public(self) -> dict[str, Any]:
        """The spec as recorded in results: everything but the key."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "api_key"}
        out["api_key_set"] = self.api_key is not None
        return out
