"""The words every package shares: a cell (`Cell`) with its workload (`Workload`, its prompts a
`DatasetSettings`) and run settings (`RunSettings`, `MemorySettings`, the energy sources), a
sweep point, its name and its load (`SweepPoint`, `point_part`, `point_shown`, `point_value`),
how its run ended (`Status`), what it measured (`CellMetrics`, the record metrics.json holds)
and a config that cannot run (`ConfigError`).

A leaf: it imports nothing from workflow_scripts, so config, engines, cell and outputs all import
it and it imports none of them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
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


NO_DRAFTER = "none"  # the drafter name of a cell without speculative decoding


# The content each dataset kind sends (DatasetSettings.content_label).
CONTENT_OF_KIND = {"sharegpt": "chat", "humaneval": "code", "random": "random tokens"}
RANDOM_TOKENS = CONTENT_OF_KIND["random"]

# A trace dataset's own keys (`workloads.<name>.dataset`, kind trace).
TRACE = ("format", "content", "time_scale", "start_s", "duration_s")


@dataclass(frozen=True)
class DatasetSettings:
    """Where a workload's prompts come from (`workloads.<name>.dataset`)."""

    kind: str  # sharegpt | humaneval | random | jsonl | trace
    shuffle_seed: int | None = None  # None: the file's own order
    package: str | None = None  # sharegpt, humaneval: the registry package that ships the file
    path: str | None = None  # a jsonl file, or a sharegpt file of one's own
    input_len: int | None = None  # random: tokens per prompt
    output_len: int | None = None  # accepted by the schema; no loader reads it
    format: str | None = None  # trace: mooncake | burstgpt
    content: str | None = None  # trace: sharegpt | humaneval (None: sharegpt)
    time_scale: float | None = None  # trace: multiplies its gaps (None: 1)
    start_s: float | None = None  # trace: the window's start on its clock (None: 0)
    duration_s: float | None = None  # trace: the window's length (None: to the end)
    max_prompt_chars: int | None = None  # sharegpt, jsonl: only prompts this short (None: all)
    conversations: bool | None = None  # sharegpt: replay whole conversations turn by turn
    max_turns: int | None = None  # conversations: human turns each at most (None: all)
    think_time_s: float | None = None  # conversations: between an answer and the next turn
    history: str | None = None  # conversations: dataset | model answers as history (None: dataset)

    def to_dict(self) -> dict[str, Any]:
        """The config's mapping: `kind` and `shuffle_seed` (validation fills it in), the other
        keys where the config gives them."""
        out: dict[str, Any] = {"kind": self.kind, "shuffle_seed": self.shuffle_seed}
        optional = ("package", "path", "input_len", "output_len", "max_prompt_chars", *TRACE)
        for name in (*optional, "conversations", "max_turns", "think_time_s", "history"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DatasetSettings:
        return cls(**data)  # the schema allows each kind its own keys and no other

    @property
    def content_label(self) -> str:
        """What the prompts are, as the tables name it (a drafter's gain depends on it):
        `chat`, `conversation`, `code`, `random tokens`, `jsonl`, or a trace's (`trace: code`)."""
        if self.kind == "trace":
            return "trace: " + CONTENT_OF_KIND[self.content or "sharegpt"]
        if self.kind == "sharegpt" and self.conversations:
            return "conversation"
        return CONTENT_OF_KIND.get(self.kind, self.kind)


@dataclass(frozen=True)
class Workload:
    """The load a cell puts on its server (`workloads.<name>`, as validated: defaults filled in).
    Its `repeats` make more cells, never different ones, so it is not part of a cell."""

    dataset: DatasetSettings
    num_prompts: int
    concurrency: int  # requests in flight at once
    max_tokens: int
    request_rate: float | None  # Poisson arrivals per second; None: all at once
    temperature: float
    ignore_eos: bool
    max_seconds: float | None  # the time cap of the measured run; None: none
    grace_s: float  # after the cap, for requests in flight
    warmup_requests: int
    request_timeout_s: float
    endpoint: str  # chat | completions
    api_key_env: str | None = None  # the variable whose key the client sends; None: the server's
    record_outputs: bool = True  # requests.jsonl keeps each answer's text (false: null)
    shared_prefix: dict[str, int] | None = None  # {tokens, count}: a common prefix; None: none

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["dataset"] = self.dataset.to_dict()
        for name in ("api_key_env", "shared_prefix"):
            if out[name] is None:
                del out[name]  # as the config has it: absent, not null
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workload:
        return cls(**{**data, "dataset": DatasetSettings.from_dict(data["dataset"])})


AXIS_LETTER = {"concurrency": "c", "request_rate": "r"}


def point_value(axis: str, value: float) -> int | float:
    """A point's load as its axis counts it: an int concurrency, a float request rate."""
    return int(value) if axis == "concurrency" else float(value)


def point_shown(value: float) -> str:
    """A point's load as its name writes it: `8`, `2.5`, `10` (no trailing `.0`)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def point_part(name: str, axis: str, value: float) -> str:
    """`w-c8`, `w-r2.5`, `w-r10`: the value as written, without a trailing `.0`. With no workload
    name (`""`) the point alone, `c8`, `r2.5`: how the sweep tables label a point. The one
    spelling of a point's name: a cell id's and a table's agree."""
    point = f"{AXIS_LETTER[axis]}{point_shown(value)}"
    return f"{name}-{point}" if name else point


@dataclass(frozen=True)
class SweepPoint:
    """Where a cell sits in a sweep (`workloads.<w>.concurrency` or `.request_rate` a list): the
    workload it comes from, the axis and value it sets, and whether the points of its series
    share one server start. Nothing about the other points: adding one changes no point's
    settings, so it reruns none."""

    workload: str  # the configured workload's name; the cell's `workload` is `<w>-c8`, `<w>-r2.5`
    axis: str  # concurrency | request_rate
    value: float  # an int for concurrency
    series: str  # the cell id without the point: model__engine__quant__drafter__<w> (+__rk)
    shared_server: bool  # the series' points run one after another on one server start

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SweepPoint | None:
        return None if data is None else cls(**data)


@dataclass(frozen=True)
class MemorySettings:
    """How a cell samples memory (`memory` of the config)."""

    interval_s: float
    baseline_samples: int  # samples before launch
    floor_gib: float  # MemAvailable below this stops the server


# Where a cell's energy is read (`energy.source` resolved for the cell, config.energy): the
# NVIDIA GPUs' NVML counters, the CPU sockets' RAPL counters, or nowhere; `auto` is resolved
# before a cell is made.
ENERGY_NVML, ENERGY_RAPL, ENERGY_NONE = "nvml", "rapl", "none"
ENERGY_AUTO = "auto"
# What a cell's `energy` says of itself (energy/record.py): read, or not, with the reason.
ENERGY_MEASURED, ENERGY_NOT_MEASURED = "measured", "not measured"


@dataclass(frozen=True)
class RunSettings:
    """The config's settings for running any cell, the engine's readiness timeout over the
    config's, and the energy source the cell reads (resolved: nvml | rapl | none)."""

    host: str  # the address servers listen on
    ready_timeout_s: float
    memory: MemorySettings
    context_guard: str  # fail | skip | size
    energy_source: str = ENERGY_NONE

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "ready_timeout_s": self.ready_timeout_s,
            "memory": {f.name: getattr(self.memory, f.name) for f in fields(self.memory)},
            "context_guard": self.context_guard,
            "energy_source": self.energy_source,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSettings:
        return cls(**{**data, "memory": MemorySettings(**data["memory"])})


@dataclass(frozen=True)
class Cell:
    """One model x engine x quant x drafter x workload point with everything it needs to run.
    The engine's and drafter's specs, the weights and the model's facts stay mappings: they are
    the engine's flags and the config's open entries."""

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
    workload_spec: Workload
    run: RunSettings
    reference: dict[str, Any] = field(default_factory=dict)
    blocked: str | None = None
    sweep: SweepPoint | None = None  # None: not a point of a sweep

    @property
    def weights_key(self) -> str:
        return f"{self.model}__{self.quant}"

    @property
    def drafter_weights_key(self) -> str | None:
        if not self.drafter_weights or self.drafter_spec is None:
            return None
        return f"{self.drafter_spec['model']}__{self.drafter_spec['quant']}"

    @property
    def concurrency(self) -> int:
        return self.workload_spec.concurrency

    @property
    def workload_name(self) -> str:
        """The `workloads` entry it runs (`workload` names a sweep's point: `sweep-c8`)."""
        return self.sweep.workload if self.sweep else self.workload

    @property
    def engine_kind(self) -> str:
        """The adapter that runs the cell (`engines.<name>.kind`)."""
        return self.engine_spec["kind"]

    @property
    def has_drafter(self) -> bool:
        return self.drafter != NO_DRAFTER

    def to_dict(self) -> dict[str, Any]:
        """Plain data (canonical-JSON-able: the cell rule's params), as the config spells it. It
        shares the cell's mappings (made for a large matrix at every parse of the Snakefile,
        where a deep copy would be a third of the parse): serialize it or copy it, never edit it."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["workload_spec"] = self.workload_spec.to_dict()
        out["run"] = self.run.to_dict()
        out["sweep"] = self.sweep.to_dict() if self.sweep else None
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cell:
        return cls(
            **{
                **data,
                "workload_spec": Workload.from_dict(data["workload_spec"]),
                "run": RunSettings.from_dict(data["run"]),
                "sweep": SweepPoint.from_dict(data.get("sweep")),
            }
        )


# What serves a cell's load, and what names a cell beside its id: every table's columns, in this
# order, and the first keys of its metrics.json.
SERVING_COLUMNS = ("model", "engine", "quant", "drafter")
IDENTITY_COLUMNS = (*SERVING_COLUMNS, "workload")


def identity_columns(source: Mapping[str, Any] | object) -> dict[str, Any]:
    """IDENTITY_COLUMNS of a metrics record or a table row (by key, None where absent) or of a
    cell, a series or a search (by attribute)."""
    if isinstance(source, Mapping):
        return {key: source.get(key) for key in IDENTITY_COLUMNS}
    return {key: getattr(source, key) for key in IDENTITY_COLUMNS}


def identity(cell: Cell) -> CellMetrics:
    """What names a cell in its metrics.json, and in the summary row of a cell not run yet."""
    return {
        "cell": cell.id,
        **identity_columns(cell),
        "concurrency": cell.concurrency,
        "request_rate": cell.workload_spec.request_rate,
        "series": cell.sweep.series if cell.sweep else None,
        "sweep": cell.sweep.to_dict() if cell.sweep else None,
        "num_prompts": cell.workload_spec.num_prompts,
        "content": cell.workload_spec.dataset.content_label,
        "synthetic": cell.weights.get("source") == "synthetic",
    }


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
    peak_delta_less_client_gib: float | None  # the drop less the load client's own RSS rise
    client_rss_rise_peak_gib: float | None
    server_rss_peak_gib: float | None
    # The server tree's RSS split (peaks over the run); None where its processes are not ours
    server_rss_anon_peak_gib: float | None
    server_rss_file_peak_gib: float | None  # mmap'd weights: page cache, counted as available
    server_rss_shmem_peak_gib: float | None
    delta_understates: bool | None  # the drop is negative or below the server's anonymous RSS
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
    """metrics.json of one cell (docs/outputs.md). total=False: a blocked or failed cell
    carries its identity, status and reason, and only what it got as far as measuring."""

    # identity
    cell: str
    model: str
    engine: str
    quant: str
    drafter: str
    workload: str
    concurrency: int
    request_rate: float | None  # Poisson arrivals per second; None: all at once
    series: str | None  # the sweep series the cell is a point of
    sweep: dict[str, Any] | None  # SweepPoint.to_dict() of a point
    server_start: dict[str, Any] | None  # a shared series' server start this point ran on
    num_prompts: int
    content: str  # what the prompts are: DatasetSettings.content_label
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
    send_lag_ms: dict[str, float] | None  # p50, p99 of sent_s - scheduled_s; None: no schedule
    # open-loop loads: TTFT and E2E from each request's scheduled time; None: a closed loop
    ttft_from_schedule_ms: Distribution | None
    e2el_from_schedule_ms: Distribution | None
    # the send lag as a share of TTFT and whether it passes the limit (loadgen.metrics)
    send_lag_check: dict[str, Any] | None
    # memory, speculative decoding, the prefix cache, checks
    mem: MemoryFigures | None
    gpu_note: str | None
    spec: SpecFigures | None
    prefix_cache_hit_pct: float | None  # prompt tokens served from the engine's prefix cache, %
    prefix_cache: str  # "on" | "off": the engine's settings let it serve prompts from its cache
    # the engine's config entry with its prefix-cache settings set aside: two cells with one
    # digest ran one engine setup but for the cache (a `prefix cache` comparison)
    engine_setup_sha256: str
    by_turn: list[dict[str, Any]] | None  # conversations: per turn index (loadgen.metrics)
    # conversations: how each ended and what became of their turns (loadgen.metrics
    # conversation_counts); None outside them
    conversations: dict[str, Any] | None
    turns: dict[str, int] | None
    context_guard: dict[str, Any]
    # a trace's prompts fitted to input_length (cell/trace_fit.py): {method: "engine tokenizer"
    # | "estimate", abs_error_tokens: {p50, max} | None, blocks | reason}; absent: no trace
    trace_fit: dict[str, Any]
    client: dict[str, Any]
    interference: dict[str, Any]
    repeats: dict[str, Any]
    # the energy of the bench, from the hardware's counters, or `not measured` with the reason
    # (energy.record.EnergyRecord.to_dict; docs/metrics.md, "Energy")
    energy: dict[str, Any]
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
