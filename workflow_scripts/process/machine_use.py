"""Who used the machine during the bench phase: the server's process tree, the client's (this
process and its load workers, without the server it launched) and everything else. Read at the
bench's start and end (`take_snapshot`), judged by pure functions into metrics.json's `client`
and `interference` objects, and described for cards and the summary (`*_note`).

- Client CPU: user + system time of its tree over the bench, in % of one core; and the busiest
  process's. An asyncio process handles one chunk at a time, so one near a full core is
  queueing chunks and adding latency of its own: `limited`.
- Other CPU: busy time of the whole machine (/proc/stat user + nice + system over every core)
  minus the server's and the client's tree CPU over the same window, in % of one core. irq and
  softirq time stay out: the loopback traffic between client and server is accounted there,
  to neither process. Steal and iowait are no work done on this machine.
- Other memory: the highest rise, over the bench's memory samples, of used memory (the fall of
  MemAvailable from the bench's first sample) beyond the rise of the server's and the client's
  RSS: memory something else took while the cell ran.

A cell is *disturbed* when the second crossed its threshold (`disturbed`): other work on the
machine shared it with the bench. A busy client (`limited`) is flagged too, but it is the bench's
own limit, the same on a rerun: it is not a disturbance, and a disturbed cell (not a limited one)
is measured again up to the config's `checks.rerun_disturbed` times (cell.run).
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import psutil

from .memory import KIB_PER_GIB, MemorySample
from .rss import process_tree

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Thresholds:
    """When a cell's measurement is flagged, and how many more times a disturbed one is
    measured: the config's `checks` (these are the schema's defaults; tests keep the two
    equal)."""

    client_process_percent_of_core: float = 85.0
    other_cpu_percent_of_core: float = 25.0
    other_mem_rise_gib: float = 0.5
    rerun_disturbed: int = 0

    @classmethod
    def from_config(cls, checks: Mapping[str, Any] | None) -> Thresholds:
        kinds = {f.name: int if f.name == "rerun_disturbed" else float for f in fields(cls)}
        return cls(**{k: kinds[k](v) for k, v in (checks or {}).items() if k in kinds})


# metrics.json's check objects and their flags: the client's own limit, and other work on the
# machine (what makes a cell disturbed).
CLIENT_LIMITED = ("client", "limited")
DISTURBED = ("interference", "flagged")
# metrics.json's key for the attempts a disturbed measurement was discarded at (cell.run).
DISTURBED_ATTEMPTS = "disturbed_attempts"
# why a disturbed cell was not measured again though `rerun_disturbed` asked (its server's
# prefix cache was on)
RERUN_SKIPPED = "rerun_skipped"


def disturbed(metrics: Mapping[str, Any] | None) -> bool | None:
    """Whether other work on the machine crossed a threshold during the cell's bench (its
    `interference` flag; of a cell's repeats, any one's); None when the cell has no such check
    (not run, failed before the bench)."""
    key, flag = DISTURBED
    found = (metrics or {}).get(key)
    return None if not found else bool(found.get(flag))


def disturbed_flag(cells: Mapping[str, Mapping[str, Any] | None]) -> str:
    """`disturbed: <name>[ and <name>]` naming which cells of a pair or a point (name -> its
    metrics) were disturbed, else '': what a comparison resting on them must say."""
    return disturbed_names([name for name, metrics in cells.items() if disturbed(metrics)])


def disturbed_names(names: Sequence[str]) -> str:
    """`disturbed: <name>[ and <name>]`, else '': the flag's words, whatever the names name."""
    return f"disturbed: {' and '.join(names)}" if names else ""


def disturbed_note(labels: Sequence[str]) -> str:
    """What an answer drawn from several cells (a crossover, a search, a frontier) must say when
    some of them were disturbed: which (`; c8 rests on a disturbed measurement …`), else ''."""
    if not labels:
        return ""
    labels = list(labels)
    joined = labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]
    verb = "rests" if len(labels) == 1 else "rest"
    return (
        f"; {joined} {verb} on a disturbed measurement (other work on the machine during the "
        "bench): read with care, or measure again (checks.rerun_disturbed)"
    )


@dataclass(frozen=True)
class ProcessCpu:
    """One process's CPU seconds: its own, and those of the children it has reaped (a finished
    worker's time lands there). `started` tells a reused pid apart."""

    pid: int
    started: float
    own_s: float
    reaped_s: float


@dataclass(frozen=True)
class UseSnapshot:
    t_s: float  # time.monotonic()
    busy_s: float  # the machine's, summed over cores
    server: tuple[ProcessCpu, ...]
    client: tuple[ProcessCpu, ...]


def read_busy_s(path: str = "/proc/stat") -> float:
    """user + nice + system seconds of all cores since boot (guest time is inside user)."""
    with open(path) as handle:
        for line in handle:
            if line.startswith("cpu "):
                user, nice, system = (int(v) for v in line.split()[1:4])
                return (user + nice + system) / CLOCK_TICKS_PER_S
    raise RuntimeError(f"{path} has no cpu line")


def tree_cpu(pid: int | None, exclude: Collection[int] = ()) -> tuple[ProcessCpu, ...]:
    if pid is None:
        return ()
    out = []
    for proc in process_tree(pid, exclude):
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                started = proc.create_time()
        except psutil.Error:
            continue
        out.append(
            ProcessCpu(
                proc.pid,
                started,
                times.user + times.system,
                times.children_user + times.children_system,
            )
        )
    return tuple(out)


def take_snapshot(server_pids: Sequence[int | None], client_pid: int | None = None) -> UseSnapshot:
    """Now: the machine's busy time, the CPU of each server root's tree, and the client's tree
    (`client_pid`, default this process) without the server roots' subtrees."""
    roots = [pid for pid in server_pids if pid]
    server: list[ProcessCpu] = []
    for pid in roots:
        server += [p for p in tree_cpu(pid) if p.pid not in {q.pid for q in server}]
    client = tree_cpu(client_pid or os.getpid(), exclude=set(roots))
    return UseSnapshot(time.monotonic(), read_busy_s(), tuple(server), client)


# --- pure: two snapshots -> figures ------------------------------------------------------


def _key(proc: ProcessCpu) -> tuple[int, float]:
    return proc.pid, proc.started


def tree_cpu_s(start: Sequence[ProcessCpu], end: Sequence[ProcessCpu]) -> float:
    """CPU seconds a tree used between two readings. Own plus reaped time, summed at the end less
    summed at the start: a process that ended and was reaped inside the tree moved its whole
    time into its parent's reaped time, and its time before the start is subtracted."""
    total = sum(p.own_s + p.reaped_s for p in end) - sum(p.own_s + p.reaped_s for p in start)
    return max(0.0, total)


def process_cpu_s(start: Sequence[ProcessCpu], end: Sequence[ProcessCpu]) -> list[float]:
    """Each process alive at the end: its own CPU seconds since the start (all of them if it
    began after)."""
    before = {_key(p): p.own_s for p in start}
    return [max(0.0, p.own_s - before.get(_key(p), 0.0)) for p in end]


def _percent(seconds: float, wall_s: float) -> float | None:
    return 100.0 * seconds / wall_s if wall_s > 0 else None


def client_use(
    start: UseSnapshot,
    end: UseSnapshot,
    choice: Mapping[str, Any] | None = None,
    thresholds: Thresholds = Thresholds(),
) -> dict[str, Any]:
    """metrics.json's `client`: its process count (and how it was chosen), its tree's CPU and
    its busiest process's, in % of one core over the bench, and whether it may have limited
    the measurement."""
    wall = end.t_s - start.t_s
    busiest = max(process_cpu_s(start.client, end.client), default=0.0)
    busiest_pct = _percent(busiest, wall)
    limit = thresholds.client_process_percent_of_core
    return {
        **(choice or {}),
        "tree_processes": len(end.client),
        "bench_s": wall,
        "cpu_percent_of_core": _percent(tree_cpu_s(start.client, end.client), wall),
        "max_process_percent_of_core": busiest_pct,
        "limit_percent_of_core": limit,
        "limited": busiest_pct is not None and busiest_pct >= limit,
    }


def other_mem_rise_gib(samples: Sequence[MemorySample]) -> float | None:
    """The highest rise of used memory during the bench beyond the server's and client's RSS
    rise, from the bench's first sample; a tree with no RSS reading adds no rise."""
    bench = [s for s in samples if s.phase == "bench"]
    if not bench:
        return None
    first = bench[0]

    def rise(now: int | None, then: int | None) -> int:
        return now - then if now is not None and then is not None else 0

    peak = max(
        (first.mem_available_kib - s.mem_available_kib)
        - rise(s.server_rss_kib, first.server_rss_kib)
        - rise(s.client_rss_kib, first.client_rss_kib)
        for s in bench
    )
    return max(0, peak) / KIB_PER_GIB


def interference(
    start: UseSnapshot,
    end: UseSnapshot,
    samples: Sequence[MemorySample] = (),
    thresholds: Thresholds = Thresholds(),
) -> dict[str, Any]:
    """metrics.json's `interference`: CPU and memory used outside the server's and client's
    trees during the bench, and whether either crossed its threshold."""
    wall = end.t_s - start.t_s
    server_s = tree_cpu_s(start.server, end.server)
    client_s = tree_cpu_s(start.client, end.client)
    machine_s = max(0.0, end.busy_s - start.busy_s)
    other_cpu = _percent(max(0.0, machine_s - server_s - client_s), wall)
    other_mem = other_mem_rise_gib(samples)
    flagged = (other_cpu is not None and other_cpu >= thresholds.other_cpu_percent_of_core) or (
        other_mem is not None and other_mem >= thresholds.other_mem_rise_gib
    )
    return {
        "bench_s": wall,
        "machine_cpu_percent_of_core": _percent(machine_s, wall),
        "server_cpu_percent_of_core": _percent(server_s, wall),
        "client_cpu_percent_of_core": _percent(client_s, wall),
        "other_cpu_percent_of_core": other_cpu,
        "other_mem_rise_gib": other_mem,
        "cpu_threshold_percent_of_core": thresholds.other_cpu_percent_of_core,
        "mem_threshold_gib": thresholds.other_mem_rise_gib,
        "flagged": bool(flagged),
    }


# --- what cards and the summary say ------------------------------------------------------


def client_note(client: Mapping[str, Any] | None) -> str:
    """A sentence when the client may have limited the measurement, else ''."""
    if not client or not client.get("limited"):
        return ""
    return (
        f"a client process used {client['max_process_percent_of_core']:.0f} % of a core "
        f"(limit {client['limit_percent_of_core']:.0f} %) with {client.get('processes')} "
        "load process(es): it may have queued chunks and added latency of its own" + _in_run(client)
    )


# The key under which a cell's folded repeats (outputs.repeats) say which repeat raised a flag.
FLAGGED_IN_RUN = "run"


def _in_run(found: Mapping[str, Any]) -> str:
    """`, in run <cell>`: which repeat a flag of a folded cell came from."""
    run = found.get(FLAGGED_IN_RUN)
    return f", in run `{run}`" if run else ""


def attempts_note(metrics: Mapping[str, Any]) -> str:
    """`; measured N times, …`: the attempts discarded as disturbed before the kept one."""
    discarded = len(metrics.get(DISTURBED_ATTEMPTS) or ())
    if metrics.get(RERUN_SKIPPED):
        return f"; {metrics[RERUN_SKIPPED]}"
    if not discarded:
        return ""
    if disturbed(metrics):
        return f"; measured {discarded + 1} times, disturbed each time (the last is kept)"
    return f"; measured {discarded + 1} times, the first {discarded} disturbed (discarded)"


def interference_note(found: Mapping[str, Any] | None) -> str:
    """A sentence when other work used the machine beyond the thresholds, else ''."""
    if not found or not found.get("flagged"):
        return ""
    parts = []
    cpu, mem = found.get("other_cpu_percent_of_core"), found.get("other_mem_rise_gib")
    if cpu is not None and cpu >= found["cpu_threshold_percent_of_core"]:
        parts.append(f"{cpu:.0f} % of a core of CPU")
    if mem is not None and mem >= found["mem_threshold_gib"]:
        parts.append(f"{mem:.2f} GiB more memory")
    return "other processes used " + " and ".join(parts) + " during the bench" + _in_run(found)
