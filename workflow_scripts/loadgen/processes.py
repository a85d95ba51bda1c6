"""How many client processes a load gets: the number asked for, or one per share of the
expected chunk rate that a single process handles without adding latency of its own.

An asyncio process handles one chunk at a time, and a batching engine sends every stream its
chunk in the same decode step: each step arrives as a burst of `concurrency` chunks, and the last
chunk of a burst waits for all those before it. Measured with `benchmarks/loadgen_overhead.py`
(pacing server: 200 chunks/s a stream, one decode step for all streams), see docs/loadgen.md."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

# A stream's chunk rate to plan for: a fast engine's decode rate for one stream (a GPU serving a
# small model; the pacing server's rate). Slower engines only leave more headroom.
EXPECTED_CHUNKS_PER_S_PER_STREAM = 200.0
# Chunks a second one process takes while its added latency stays under 2 ms at p99: 32 streams
# of 200 chunks/s. Measured on a 2-vCPU AMD EPYC VM, client alone on a core (docs/loadgen.md):
# one process added 1.65-1.75 ms at p99 at 32 streams, 3.1 ms at 64, 13 ms at 128 and 73-79 ms
# at 256 (it spends ~27 us a chunk there, so a decode step of 256 chunks alone is ~7 ms of
# work). Faster CPUs take more (~11 us a chunk on another machine): this errs towards more
# processes.
CHUNKS_PER_S_PER_PROCESS = 6_400.0
SET, AUTO = "set", "auto"


@dataclass(frozen=True)
class ProcessChoice:
    """The client's process count and why: `set` (asked for) or `auto` (from the expected chunk
    rate, capped by the cores this process may run on and by the concurrency)."""

    processes: int
    source: str
    expected_chunks_per_s: float | None = None
    cores: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "processes": self.processes,
            "processes_source": self.source,
            "expected_chunks_per_s": self.expected_chunks_per_s,
            "cores": self.cores,
        }


def usable_cores() -> int:
    """Cores this process may run on (its affinity, e.g. under taskset or a Slurm allocation)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def choose_processes(
    concurrency: int, asked: int | None = None, cores: int | None = None
) -> ProcessChoice:
    """`asked` when given; else ceil(concurrency × expected chunk rate ÷ one process's share),
    at most one per usable core and one per stream."""
    if asked is not None:
        if asked < 1:
            raise ValueError("processes must be at least 1")
        return ProcessChoice(asked, SET)
    cores = usable_cores() if cores is None else cores
    expected = concurrency * EXPECTED_CHUNKS_PER_S_PER_STREAM
    wanted = math.ceil(expected / CHUNKS_PER_S_PER_PROCESS)
    return ProcessChoice(max(1, min(wanted, cores, concurrency)), AUTO, expected, cores)
