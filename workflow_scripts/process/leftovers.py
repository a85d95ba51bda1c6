"""What a killed run (SIGKILL, the out-of-memory killer) leaves running: its PDEATHSIG reaches only
the server's first process, so the server's children live on, and a container outlives its
client. While a server runs, a small record names what it started; the next launch with the
same record ends what of it still runs, then starts its own.

A process is ended only while its pid AND its start time (clock ticks after boot, field 22 of
/proc/PID/stat) match the record, on the same boot of the same machine (a record written on
another Slurm node names nothing here): a pid the kernel has since given to another process is
never touched. Nothing is ended while the run (another process) that wrote the record still
runs, unless that run is an orphan: a job whose Snakemake (its `owner`, on record) is gone, which
nothing will ever end (a SIGKILLed Snakemake's series job, cell.shared); the orphan is then ended
first, then what it started. A record names the processes seen when the server started, while
it was watched until ready, and at ready (engines start their workers before they answer); a
worker first started later, under load, is not on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..atomic import write_json
from ..terminal import say

PROC = Path("/proc")
GONE_STATES = ("Z", "X")  # a zombie holds no memory, port or GPU: it is gone for us


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat a record needs."""

    pid: int
    name: str
    state: str
    ppid: int
    pgid: int
    start_ticks: int


@dataclass(frozen=True)
class Started:
    """A process as the record names it: its pid and when it started."""

    pid: int
    start_ticks: int


@dataclass(frozen=True)
class Record:
    """What one launch started: its server's processes and container, and the run (process)
    that started them."""

    boot_id: str
    runner: Started
    processes: tuple[Started, ...] = ()
    pgid: int | None = None
    container: str | None = None
    owner: Started | None = None  # the Snakemake the runner is a job of (None: not a job)

    def to_dict(self) -> dict[str, Any]:
        return {
            "boot_id": self.boot_id,
            "runner": vars(self.runner),
            "processes": [vars(p) for p in self.processes],
            "pgid": self.pgid,
            "container": self.container,
            "owner": vars(self.owner) if self.owner else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record:
        return cls(
            boot_id=str(data["boot_id"]),
            runner=Started(**data["runner"]),
            processes=tuple(Started(**p) for p in data.get("processes") or ()),
            pgid=data.get("pgid"),
            container=data.get("container"),
            owner=Started(**data["owner"]) if data.get("owner") else None,
        )


def parse_stat(text: str) -> ProcStat:
    """/proc/PID/stat's text. The command name may hold spaces and parentheses: the fields
    after it start after its last `)`."""
    head, _, rest = text.rpartition(")")
    pid, _, name = head.partition("(")
    fields = rest.split()
    # rest starts at field 3 (state); ppid is 4, pgrp 5, starttime 22
    return ProcStat(
        pid=int(pid),
        name=name,
        state=fields[0],
        ppid=int(fields[1]),
        pgid=int(fields[2]),
        start_ticks=int(fields[19]),
    )


def still_running(started: Started, live: ProcStat | None) -> bool:
    """The recorded process itself still runs: its pid is live, not a zombie, and started when
    the record says (a reused pid starts later)."""
    return (
        live is not None
        and live.pid == started.pid
        and live.state not in GONE_STATES
        and live.start_ticks == started.start_ticks
    )


def runner_running(record: Record, boot_id: str, live: Mapping[int, ProcStat]) -> bool:
    """The run that wrote the record still runs (then all it names is its own): its runner runs,
    and so does the Snakemake it is a job of, where the record names one."""
    return (
        record.boot_id == boot_id
        and still_running(record.runner, live.get(record.runner.pid))
        and (record.owner is None or still_running(record.owner, live.get(record.owner.pid)))
    )


def orphaned(record: Record, boot_id: str, live: Mapping[int, ProcStat]) -> bool:
    """The runner still runs though the Snakemake it is a job of is gone: no one will end it."""
    return (
        record.boot_id == boot_id
        and record.owner is not None
        and still_running(record.runner, live.get(record.runner.pid))
        and not still_running(record.owner, live.get(record.owner.pid))
    )


def leftovers(record: Record, boot_id: str, live: Mapping[int, ProcStat]) -> list[Started]:
    """The recorded processes to end: those still running, unless the record is from another
    boot (nothing of it can run) or its runner still runs."""
    if record.boot_id != boot_id or runner_running(record, boot_id, live):
        return []
    return [p for p in record.processes if still_running(p, live.get(p.pid))]


def is_snakemake(argv: Sequence[str]) -> bool:
    """A Snakemake process's command line: `snakemake ...`, `python .../bin/snakemake ...` or
    `python -m snakemake ...` (a job's own command line names a script, never the program)."""
    names = [Path(arg).name for arg in argv[:3]]
    if names[:1] == ["snakemake"]:
        return True
    return bool(names) and names[0].startswith("python") and "snakemake" in names[1:3]


def owner_in(ancestors: Sequence[tuple[ProcStat, Sequence[str]]]) -> Started | None:
    """The nearest ancestor (stat, argv; the parent first) that is a Snakemake: the run a job
    belongs to. None outside Snakemake."""
    for stat, argv in ancestors:
        if is_snakemake(argv):
            return Started(stat.pid, stat.start_ticks)
    return None


def members(leader: int, stats: Iterable[ProcStat]) -> list[ProcStat]:
    """A server's processes: the leader, its descendants, and what else is in its process group
    (a grandchild whose parent exited keeps the group)."""
    stats = [s for s in stats if s.state not in GONE_STATES]
    children: dict[int, list[ProcStat]] = {}
    for stat in stats:
        children.setdefault(stat.ppid, []).append(stat)
    found = {s.pid: s for s in stats if s.pid == leader or s.pgid == leader}
    todo = [leader, *found]
    while todo:
        for child in children.get(todo.pop(), []):
            if child.pid not in found:
                found[child.pid] = child
                todo.append(child.pid)
    return sorted(found.values(), key=lambda s: s.pid)


# -- the edges: /proc, the record file, signals, docker ----------------------------------------


def boot_id() -> str:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def read_stat(pid: int) -> ProcStat | None:
    try:
        return parse_stat((PROC / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def all_stats() -> list[ProcStat]:
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := read_stat(int(entry.name))) is not None:
            found.append(stat)
    return found


def started(pid: int) -> Started | None:
    stat = read_stat(pid)
    return Started(stat.pid, stat.start_ticks) if stat else None


def is_running(pid: int | None, start_ticks: int | None = None) -> bool:
    """The process runs: its pid is live and not a zombie (which `os.kill(pid, 0)` takes for
    alive until its parent reaps it), and, where given, it started at `start_ticks`."""
    if not pid:
        return False
    stat = read_stat(pid)
    if start_ticks is None:
        return stat is not None and stat.state not in GONE_STATES
    return still_running(Started(pid, start_ticks), stat)


def _argv(pid: int) -> list[str]:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def owner_of(pid: int) -> Started | None:
    """The Snakemake that `pid` is a job of (owner_in), found by walking up its ancestors."""
    ancestors = []
    stat = read_stat(pid)
    while stat is not None and stat.ppid > 1 and len(ancestors) < 64:
        stat = read_stat(stat.ppid)
        if stat is not None:
            ancestors.append((stat, _argv(stat.pid)))
    return owner_in(ancestors)


def record_of(leader: int | None, container: str | None) -> Record:
    """The record of a server now: this process as its runner, the leader's processes, the
    Snakemake this process is a job of."""
    runner = started(os.getpid()) or Started(os.getpid(), 0)
    processes: tuple[Started, ...] = ()
    if leader is not None:
        processes = tuple(Started(s.pid, s.start_ticks) for s in members(leader, all_stats()))
    return Record(boot_id(), runner, processes, leader, container, owner_of(os.getpid()))


def write_record(path: Path, record: Record) -> None:
    with contextlib.suppress(OSError):  # a record helps the next run; it never fails this one
        write_json(path, record.to_dict())


def read_record(path: Path) -> Record | None:
    try:
        return Record.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)  # torn or foreign: it names nothing we could trust
        return None


def live_stats(record: Record) -> dict[int, ProcStat]:
    pids = {record.runner.pid, *(p.pid for p in record.processes)}
    if record.owner is not None:
        pids.add(record.owner.pid)
    return {pid: stat for pid in pids if (stat := read_stat(pid)) is not None}


def _kill(process: Started) -> bool:
    """SIGKILL the process if it is still the recorded one. A pidfd holds the process while its
    start time is checked, so the signal cannot reach a process that took the pid since."""
    try:
        fd = os.pidfd_open(process.pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):
        fd = None  # no pidfd (old kernel): the check and the kill are microseconds apart
    try:
        if not still_running(process, read_stat(process.pid)):
            return False
        if fd is None:
            os.kill(process.pid, signal.SIGKILL)
        else:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):  # gone, or not ours to signal
        return False
    finally:
        if fd is not None:
            os.close(fd)


def _wait_gone(processes: list[Started], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(still_running(p, read_stat(p.pid)) for p in processes):
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)


def _docker(argv: list[str], timeout_s: float = 60.0) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(
            ["docker", *argv],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def container_running(name: str) -> bool:
    done = _docker(["ps", "--filter", f"name=^/?{name}$", "--format", "{{.Names}}"])
    return done is not None and done.returncode == 0 and name in done.stdout.split()


def end_leftovers(path: Path) -> str | None:
    """End what the run that wrote `path` left running (see the module's docstring), say so in
    one line on the terminal, and drop the record. Returns that line; None if nothing ran."""
    record = read_record(path)
    if record is None:
        return None
    live, boot = live_stats(record), boot_id()
    if record.runner.pid == os.getpid():
        live.pop(record.runner.pid, None)  # this process's own earlier launch: it is over
    if runner_running(record, boot, live):
        return None  # its run is still going: what it started is its own
    what = []
    if orphaned(record, boot, live) and _kill(record.runner):
        # first: a live orphan would record its server's death over the new run's record
        _wait_gone([record.runner])
        name = live[record.runner.pid].name
        what.append(f"pid {record.runner.pid} ({name}, a job of a run that is gone)")
        live = live_stats(record)
    same_machine = record.boot_id == boot  # another node's (Slurm) or another boot's: not ours
    if same_machine and record.container and container_running(record.container):
        _docker(["rm", "-f", record.container])  # first: docker stops what runs inside
        what.append(f"container {record.container}")
    ended = [p for p in leftovers(record, boot, live) if _kill(p)]
    _wait_gone(ended)
    if ended:
        what.append("pid " + ", ".join(f"{p.pid} ({live[p.pid].name})" for p in ended))
    path.unlink(missing_ok=True)
    if not what:
        return None
    line = f"{path.stem}: ended what an earlier run of it left running: {'; '.join(what)}"
    say(line)
    return line


def drop_record(path: Path, timeout_s: float = 2.0) -> bool:
    """After a teardown: drop the record once nothing it names still runs (a SIGKILL lands in
    a moment; what still runs after `timeout_s` is left to the next run). True when dropped."""
    record = read_record(path)
    if record is None:
        return True
    _wait_gone(list(record.processes), timeout_s)
    live = live_stats(record)
    if any(still_running(p, live.get(p.pid)) for p in record.processes):
        return False
    path.unlink(missing_ok=True)
    return True
