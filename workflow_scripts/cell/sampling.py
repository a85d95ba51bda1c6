"""A cell's memory sampler, built one way for a cell's own server, a series' server and a point
on it, and its start: the baseline before launch, the idle draw read across it, then sampling."""

from __future__ import annotations

import os
from collections.abc import Callable

from ..process.memory import KIB_PER_GIB, MemorySampler
from ..vocabulary import Cell
from .energy import Meter, idle_across


def memory_sampler(
    cell: Cell, stop_server: Callable[[], object], meter: Meter | None = None
) -> MemorySampler:
    """The cell's memory sampler (the one way it is built: a cell's own server, a series'
    server, a point on it), reading the meter's source beside memory; below the floor, it stops
    the server."""
    memory = cell.run.memory
    return MemorySampler(
        interval_s=float(memory.interval_s),  # recorded in metrics.json `mem` as a float
        floor_kib=int(memory.floor_gib * KIB_PER_GIB),
        on_floor=lambda sample: stop_server(),
        energy=meter.probe if meter is not None else None,
    )


def start_sampling(sampler: MemorySampler, cell: Cell, meter: Meter) -> None:
    """The baseline before launch, the idle draw read across it, then sampling until
    teardown. The client's tree (this process) is sampled from the baseline on: its rise above
    its own baseline is what the summary's memory figure does not charge to the server."""
    sampler.watch_client(os.getpid())
    idle_across(meter, lambda: sampler.take_baseline(cell.run.memory.baseline_samples), sampler)
    sampler.start()
