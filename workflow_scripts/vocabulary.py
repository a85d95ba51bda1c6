"""The words every package shares: a cell (`Cell`), how its run ended (`Status`), what it
measured (`CellMetrics`, the record metrics.json holds) and a config that cannot run
(`ConfigError`).

A leaf: it imports nothing from workflow_scripts, so config, engines, cell and outputs all import
it and it imports none of them back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, TypedDict


class ConfigError(ValueError):
    """A config that cannot be run; the message names the offending key."""


class Status(StrEnum):
    """How a cell's (or a weights or engine step's) run ended. A str: metrics.json, the CSV
    tables and comparisons with the text read back from them see "done", "failed", "blocked"."""

    DONE = "done"
    FAILED = "failed"
    BLOCKED = "blocked"


@dataclass(frozen=True)
class Cell:
    """One model x engine x quant x drafter x workload point with everything it needs to run."""

    id: str
    model: str
    quant: str
    engine: str
    drafter: str
    workload: str
    model_info: dict[str, Any]
    weights: dict[str, Any]
    engine_spec: dict[str, Any]
    drafter_spec: dict[str, Any] | None
    drafter_weights: dict[str, Any] | None
    workload_spec: dict[str, Any]
    run: dict[str, Any]
    reference: dict[str, Any] = field(default_factory=dict)
    blocked: str | None = None

    @property
    def weights_key(self) -> str:
        return f"{self.model}__{self.quant}"

    @property
    def drafter_weights_key(self) -> str | None:
        if not self.drafter_weights:
            return None
        return f"{self.drafter_spec['model']}__{self.drafter_spec['quant']}"

    @property
    def concurrency(self) -> int:
        return int(self.workload_spec["concurrency"])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cell:
        return cls(**data)


class Distribution(TypedDict, total=False):
    """A latency figure over the completed requests, in ms."""

    count: int
    mean: float | None
    median: float | None
    p90: float | None
    p99: float | None


class MemoryFigures(TypedDict, total=False):
    """`mem` of metrics.json: MemAvailable below the baseline, per phase, and the server's RSS."""

    baseline_available_gib: float
    peak_delta_gib: float
    load_peak_delta_gib: float | None
    bench_peak_delta_gib: float | None
    server_rss_peak_gib: float | None
    gpu_used_peak_gib: float | None
    interval_s: float


class SpecFigures(TypedDict, total=False):
    """`spec` of metrics.json: speculative decoding's acceptance, and where it was read."""

    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position: list[float]
    source: str | None
    drafts: int
    note: str
    cap_note: str
    timings_acceptance_rate: float


class CellMetrics(TypedDict, total=False):
    """metrics.json of one cell (DESIGN.md, Contracts). total=False: a blocked or failed cell
    carries its identity, status and reason, and only what it got as far as measuring."""

    # identity
    cell: str
    model: str
    engine: str
    quant: str
    drafter: str
    workload: str
    concurrency: int
    num_prompts: int
    synthetic: bool
    status: Status
    reason: str | None
    traceback: str
    # counts and rates
    completed: int
    errors: int
    incomplete: int
    not_started: int
    prompt_tokens: int
    completion_tokens: int
    content_chunks: int
    errors_by_reason: dict[str, int]
    hit_time_cap: bool
    duration_s: float
    prefill_tok_s: float
    decode_tok_s: float
    req_per_s: float
    token_count_source: str
    retries: int
    # latency
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2el_ms: Distribution
    itl_per_token_ms: Distribution
    tokens_per_chunk: Distribution
    # memory, speculative decoding, checks
    mem: MemoryFigures | None
    gpu_note: str | None
    spec: SpecFigures | None
    context_guard: dict[str, Any]
    client: dict[str, Any]
    interference: dict[str, Any]
    repeats: dict[str, Any]
    # provenance
    ready_s: float
    engine_version: str | None
    server_version: str | None
    server_command: list[str]
    server_env: dict[str, str]
    client_command: list[str]
    container_image_id: str | None
    dataset_sha256: str
    dataset_note: str | None
    prompt_indices: list[int]
    load: dict[str, Any]
    started_at: str
    finished_at: str
    host: dict[str, Any]
    weights: dict[str, Any]
    engine_info: dict[str, Any]
