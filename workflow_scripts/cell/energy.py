"""A cell's energy, read as it runs (energy/ holds the readers and the figures; docs/metrics.md,
"Energy", says how each is read):

- the source its settings name (`run.energy_source`, resolved by config.energy), opened for
  the GPUs its server sees (`server_visible_devices`) before the server starts;
- the idle draw read across the memory baseline, before the server starts (`idle_across`): a
  shared server's series takes it once, and its points hold their bench against it;
- the counter read at the bench window's edges (attempts.BenchWindow calls `read_edge`), the
  sampler's power and counter series beside its memory samples;
- metrics.json's `energy` from all of it (`energy_record`), `not measured` with the reason
  when the source could not be opened or read (never a 0, and never the cell's failure).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..energy.counters import CounterRead
from ..energy.figures import Readings, cell_energy
from ..energy.meter import IdleBaseline, Unavailable, idle_from_power, idle_from_reads, open_source
from ..energy.record import not_measured, with_client_share, with_disturbed
from ..energy.source import COUNTER, NONE, EnergySource
from ..energy.windows import Window
from ..loadgen.client import LoadResult
from ..process.machine_use import UseSnapshot, disturbed, tree_cpu_s
from ..process.memory import MemorySampler, energy_series
from ..vocabulary import Cell

VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
NOT_READ = "energy.source is none: no counter is read"


def docker_visible_devices(gpus: str) -> str | None:
    """The devices `docker run --gpus <gpus>` gives the container, as CUDA_VISIBLE_DEVICES
    spells them: `all` -> None (every one), `device=0,2` (quoted or not) -> `0,2`, a count N ->
    the first N (NVIDIA's runtime takes them in index order), empty -> `` (none)."""
    value = gpus.strip().strip("'\"").strip()
    if value == "all":
        return None
    if value.startswith("device="):
        return value[len("device=") :]
    if value.isdigit():
        return ",".join(str(i) for i in range(int(value)))
    return value


def server_visible_devices(engine_spec: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """The GPUs the cell's server sees, as CUDA_VISIBLE_DEVICES names them (None: every one): a
    container's from its `--gpus`; a process's from its own environment (`env`: the engine's),
    else the one it inherits from this job (a Slurm job's GPUs)."""
    if engine_spec.get("launch") == "docker":
        return docker_visible_devices(str((engine_spec.get("docker") or {}).get("gpus") or ""))
    return env.get(VISIBLE_DEVICES, os.environ.get(VISIBLE_DEVICES))


@dataclass
class Meter:
    """A cell's source as it was opened (None: `tried` says why), the idle draw, and the reads
    at the current attempt's bench edges (`failure`: why one could not be read)."""

    source: EnergySource | None
    tried: tuple[tuple[str, str], ...] = ()
    visible_devices: str | None = None
    idle: IdleBaseline | None = None
    reads: dict[str, CounterRead | None] = field(default_factory=dict)
    failure: str = ""
    _idle_start: CounterRead | None = None

    @property
    def probe(self) -> EnergySource | None:
        """What the memory sampler reads beside its memory figures."""
        return self.source

    def _read(self) -> CounterRead | None:
        return self.source.read() if self.source is not None else None

    def read_edge(self, edge: str) -> None:
        """The counter at one edge of the bench (`start`, `end`); a read that fails (a GPU
        lost, a counter that went unreadable) is the record's reason, not the cell's failure."""
        if self.source is None:
            return
        try:
            self.reads[edge] = self._read()
        except Exception as exc:
            self.failure = f"the counter could not be read at the bench's {edge}: {exc}"

    def clear(self) -> None:
        """A new attempt: its own edges."""
        self.reads.clear()
        self.failure = ""

    def series_facts(self) -> dict[str, Any]:
        """What a shared server's record carries to its points."""
        return {
            "visible_devices": self.visible_devices,
            "idle": self.idle.to_dict() if self.idle else None,
        }


def open_meter(source: str, visible_devices: str | None) -> Meter:
    """The cell's source (`run.energy_source`) opened for `visible_devices`."""
    if source == NONE:
        return Meter(None, ((NONE, NOT_READ),), visible_devices)
    try:
        found = open_source(order=(source,), visible_devices=visible_devices)
    except Exception as exc:  # a driver that fails past its start: a reason, not the cell's end
        return Meter(None, ((source, f"{type(exc).__name__}: {exc}"),), visible_devices)
    if isinstance(found, Unavailable):
        return Meter(None, found.tried, visible_devices)
    return Meter(found, (), visible_devices)


def meter_for(cell: Cell, env: Mapping[str, str]) -> Meter:
    """A cell's meter, for the server it starts (`env`: the server's own environment)."""
    return open_meter(cell.run.energy_source, server_visible_devices(cell.engine_spec, env))


def attached_meter(source: str, facts: Mapping[str, Any] | None) -> Meter:
    """A point's meter on its series' server: opened for the GPUs the server sees, holding
    the idle draw the server job read before it started the server."""
    facts = facts or {}
    meter = open_meter(source, facts.get("visible_devices"))
    if facts.get("idle"):
        meter.idle = IdleBaseline.from_dict(facts["idle"])
    return meter


def idle_across(meter: Meter, take_baseline: Callable[[], None], sampler: MemorySampler) -> None:
    """Take the memory baseline (before the server starts) and read the idle draw across it: the
    counter at its two edges, or the power samples it took."""
    if meter.source is None:
        take_baseline()
        return
    info = meter.source.info()
    try:
        start = meter._read()
        take_baseline()
        end = meter._read()
    except Exception as exc:
        meter.idle = None
        meter.failure = f"the idle draw could not be read: {exc}"
        return
    if info.method == COUNTER and start is not None and end is not None:
        meter.idle = idle_from_reads(info, start, end)
        return
    power = [
        (sampler.epoch_origin_s + s.t, s.power_w)
        for s in sampler.samples
        if s.phase == "baseline" and s.power_w is not None
    ]
    if len(power) >= 2:
        meter.idle = idle_from_power(power, Window(power[0][0], power[-1][0]), sampler.interval_s)


def _cpu_s(use: Mapping[str, UseSnapshot]) -> tuple[float | None, float | None]:
    """The client tree's CPU seconds and the machine's busy seconds over the bench."""
    start, end = use.get("start"), use.get("end")
    if start is None or end is None:
        return None, None
    return tree_cpu_s(start.client, end.client), max(0.0, end.busy_s - start.busy_s)


def energy_record(
    meter: Meter | None,
    sampler: MemorySampler,
    load: LoadResult,
    slots: int,
    interference: Mapping[str, Any] | None,
    use: Mapping[str, UseSnapshot],
) -> dict[str, Any]:
    """metrics.json's `energy` for the kept attempt: measured over its bench window against
    the idle draw, the client's CPU share beside a package counter, marked when other work
    disturbed the bench; else `not measured` with the reason."""
    if meter is None:
        return not_measured(((NONE, "no energy source was opened for this cell"),)).to_dict()
    if meter.source is None:
        return not_measured(meter.tried).to_dict()
    info = meter.source.info()
    if meter.failure:
        return not_measured(((info.source, meter.failure),)).to_dict()
    readings = Readings(
        meter.reads.get("start"),
        meter.reads.get("end"),
        power=energy_series(sampler.samples, sampler.epoch_origin_s, "power_w"),
        energy=energy_series(sampler.samples, sampler.epoch_origin_s, "energy_j"),
        interval_s=sampler.interval_s,
    )
    try:
        record = cell_energy(info, readings, meter.idle, load.records, load.epoch_origin_s, slots)
    except ValueError as exc:  # no read at an edge, a counter that went down (a reset)
        return not_measured(((info.source, f"no figure from the reads: {exc}"),)).to_dict()
    record = with_client_share(record, *_cpu_s(use))
    record = with_disturbed(record, disturbed({"interference": interference}))
    return record.to_dict()
