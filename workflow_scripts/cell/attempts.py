"""One measured attempt on a cell's server, and measuring again while it was disturbed: the
bench window (what is read at the measured run's edges: the engine's speculative-decoding and
prefix-cache counters, the CPU snapshots, the energy counter), the warm-up, load and scrape of
an attempt, and the rule of `checks.rerun_disturbed` (only on a server whose prefix cache is
off)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import requests

from ..engines.base import EngineAdapter, SpecCounters
from ..loadgen.client import LoadResult, LoadSettings, RunOptions, run_load
from ..loadgen.metrics import compute_metrics
from ..loadgen.prompts import Prompt
from ..loadgen.records import OK, RequestRecord
from ..process.auth import auth_headers
from ..process.machine_use import (
    Thresholds,
    UseSnapshot,
    disturbed,
    interference,
    interference_note,
    take_snapshot,
)
from ..process.memory import MemorySampler
from ..terminal import say
from ..vocabulary import Cell
from .energy import Meter


def _scrape(base_url: str, paths: list[str]) -> str | None:
    """The first of `paths` (a path, then its deprecated alias) the server answers."""
    for path in paths:
        try:
            resp = requests.get(base_url + path, timeout=10, headers=auth_headers())
        except requests.RequestException:
            continue
        if resp.status_code == 200:
            return resp.text
    return None


class BenchWindow:
    """What is read at the edges of the measured run: the engine's speculative-decoding counters
    and its prefix cache's text before and after, the CPU snapshots of the server's and the
    client's trees, and the energy counter (`meter`), read closest to the run: last at its
    start, first at its end."""

    def __init__(
        self,
        adapter: EngineAdapter,
        base_url: str,
        sampler: MemorySampler,
        server_roots: tuple[int | None, ...],
        meter: Meter | None = None,
    ) -> None:
        self.adapter, self.base_url = adapter, base_url
        self.sampler, self.server_roots = sampler, server_roots
        self.meter = meter
        self.counters: dict[str, SpecCounters | None] = {}
        self.cache_texts: dict[str, str | None] = {}
        self.use: dict[str, UseSnapshot] = {}

    def _read(self, edge: str) -> None:
        """The engine's counters at one edge ("before", "after"): one scrape where the
        prefix cache's counters live beside the speculative-decoding ones."""
        adapter = self.adapter
        text = _scrape(self.base_url, adapter.paths_to_try(adapter.metrics_path))
        self.counters[edge] = adapter.parse_spec_metrics(text) if text else None
        cache_path = adapter.prefix_cache_path
        if cache_path is not None and cache_path != adapter.metrics_path:
            text = _scrape(self.base_url, adapter.paths_to_try(cache_path))
        self.cache_texts[edge] = text if cache_path is not None else None

    def measure_start(self) -> None:
        self.sampler.set_phase("bench")
        self._read("before")
        self.use["start"] = take_snapshot(self.server_roots)
        if self.meter is not None:
            self.meter.read_edge("start")

    def measure_end(self) -> None:
        if self.meter is not None:
            self.meter.read_edge("end")
        self.use["end"] = take_snapshot(self.server_roots)

    def scrape_after(self) -> None:
        self._read("after")

    def clear(self) -> None:
        self.use.clear()
        self.counters.clear()
        self.cache_texts.clear()
        if self.meter is not None:
            self.meter.clear()

    def prefix_cache_hit_pct(self, records: Sequence[RequestRecord]) -> float | None:
        """The engine's prefix-cache hit rate over the measured run (metrics.json
        `prefix_cache_hit_pct`): its adapter reads the completed measured requests or the
        counters read at the run's edges; None where the engine reports none."""
        measured = [r for r in records if not r.warmup and r.status == OK]
        before, after = self.cache_texts.get("before"), self.cache_texts.get("after")
        return self.adapter.prefix_cache_hit_pct(measured, before, after)


@dataclass(frozen=True)
class Attempt:
    """One warm-up, load and scrape on the server: what the load returned, the server's death
    during it, and what other work used the machine during its bench (None: no bench ran)."""

    load: LoadResult
    died: str | None
    interference: dict[str, Any] | None

    @property
    def disturbed(self) -> bool:
        return bool(disturbed({"interference": self.interference}))


def measure_once(
    cell: Cell,
    spec: LoadSettings,
    prompts: list[Prompt],
    window: BenchWindow,
    died: Callable[[str], str | None],
    thresholds: Thresholds,
) -> Attempt:
    """Warm up, load and scrape once; the other work is judged on this attempt's own bench
    (its snapshots, the memory samples taken since it began)."""
    sampler = window.sampler
    samples_from = len(sampler.samples)
    window.clear()
    sampler.set_phase("warmup")
    load = run_load(
        spec,
        prompts,
        RunOptions(
            progress_label=cell.id,
            on_measure_start=window.measure_start,
            on_measure_end=window.measure_end,
        ),
    )
    death = died("while the load ran")
    window.scrape_after()
    found = None
    if "start" in window.use and "end" in window.use:
        found = interference(
            window.use["start"],
            window.use["end"],
            sampler.samples[samples_from:],
            thresholds,
        )
    return Attempt(load, death, found)


def prefix_cache_off(cell: Cell, adapter: EngineAdapter) -> bool:
    """The cell's server serves no prompt from its prefix cache (a sweep's shared server, or
    settings that turn it off): a second attempt on it measures what the first one did."""
    settings = cell.engine_spec.get("settings") or {}
    return all(settings.get(key) == value for key, value in adapter.prefix_cache_off.items())


def prefix_cache_facts(cell: Cell, adapter: EngineAdapter) -> dict[str, str]:
    """metrics.json's `prefix_cache` (on or off) and `engine_setup_sha256`: the cell's engine
    entry (its name aside) with the adapter's prefix-cache settings set aside, so that two
    cells whose engines differ in nothing but the cache compare as a `prefix cache` pair."""
    settings = cell.engine_spec.get("settings") or {}
    setup = {k: v for k, v in cell.engine_spec.items() if k != "name"}  # the entry, not its key
    setup["settings"] = {k: v for k, v in settings.items() if k not in adapter.prefix_cache_off}
    text = json.dumps(setup, sort_keys=True, default=str)
    return {
        "prefix_cache": "off" if prefix_cache_off(cell, adapter) else "on",
        "engine_setup_sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


NO_FAIR_RERUN = (
    "not measured again on its server: its prefix cache is on and would serve the first "
    "attempt's prompts (rerun the cell, e.g. `snakemake -R`, for a fresh server)"
)


def reruns_allowed(cell: Cell, adapter: EngineAdapter, rerun_disturbed: int) -> int:
    """`checks.rerun_disturbed` where a rerun on the same server is a fair measurement, else
    0: a server whose prefix cache holds the first attempt's prompts would serve the second
    from it (TTFT of cache hits), a faster figure that measures something else."""
    return rerun_disturbed if prefix_cache_off(cell, adapter) else 0


def measure_until_undisturbed(
    attempt: Callable[[], Attempt], reruns: int, label: str
) -> tuple[Attempt, list[dict[str, Any]]]:
    """Measure, and while other work disturbed the measurement measure again, at most `reruns`
    more times: the first undisturbed attempt is kept, else the last (reported disturbed). A
    server that died ends it at once. Returns the kept attempt and, for each discarded one,
    its number, its interference and its headline figures."""
    discarded: list[dict[str, Any]] = []
    while True:
        found = attempt()
        if found.died or not found.disturbed or len(discarded) >= reruns:
            return found, discarded
        figures = compute_metrics(found.load.records, hit_time_cap=found.load.hit_time_cap)
        discarded.append(
            {
                "attempt": len(discarded) + 1,
                "interference": found.interference,
                "completed": figures["completed"],
                "decode_tok_s": figures["decode_tok_s"],
                "ttft_median_ms": (figures.get("ttft_ms") or {}).get("median"),
                "tpot_median_ms": (figures.get("tpot_ms") or {}).get("median"),
            }
        )
        say(
            f"{label}: attempt {len(discarded)} disturbed "
            f"({interference_note(found.interference)}); measuring again"
        )
