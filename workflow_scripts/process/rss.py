"""Resident memory of a process tree: each process's /proc/<pid>/status read once, VmRSS and
its split into anonymous, file-backed and shared-memory pages, summed over the tree (less the
subtrees it is told to leave out). The memory sampler (process.memory) reads it every sample."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import psutil

# A tree rooted at one of these is a container client: the server runs in the container, so
# the tree's memory is the client's, not the server's; its split is unknown (null), never 0.
CONTAINER_CLIENTS = frozenset({"docker", "podman", "nerdctl"})


@dataclass(frozen=True)
class RssSplit:
    """Resident memory in KiB, whole (VmRSS) and split (RssAnon + RssFile + RssShmem = VmRSS);
    a part is None on a kernel that does not split it (before Linux 4.5)."""

    rss_kib: int
    anon_kib: int | None
    file_kib: int | None
    shmem_kib: int | None


# The lines of /proc/<pid>/status read, and the RssSplit field each fills.
STATUS_KEYS = {
    "VmRSS": "rss_kib",
    "RssAnon": "anon_kib",
    "RssFile": "file_kib",
    "RssShmem": "shmem_kib",
}


def parse_status_rss(text: str) -> RssSplit | None:
    """The resident memory lines of a /proc/<pid>/status text (`RssAnon:  1234 kB`); None for
    a process with no memory figures (a kernel thread, a zombie)."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in STATUS_KEYS:
            found[STATUS_KEYS[name]] = int(rest.split()[0])
    if "rss_kib" not in found:
        return None
    return RssSplit(
        found["rss_kib"], found.get("anon_kib"), found.get("file_kib"), found.get("shmem_kib")
    )


def read_status_rss(pid: int) -> RssSplit | None:
    """One process's resident memory from /proc/<pid>/status (readable for any process, a
    container's too); None when it is gone or has none."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            return parse_status_rss(handle.read())
    except (OSError, ValueError, IndexError):
        return None


def _sum_part(values: Sequence[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def sum_rss(splits: Sequence[RssSplit]) -> RssSplit | None:
    """A process tree's resident memory: each part summed over its processes (a part unknown for
    one of them is unknown for the tree); None for no process."""
    if not splits:
        return None
    return RssSplit(
        sum(s.rss_kib for s in splits),
        _sum_part([s.anon_kib for s in splits]),
        _sum_part([s.file_kib for s in splits]),
        _sum_part([s.shmem_kib for s in splits]),
    )


def process_tree(pid: int, exclude: Collection[int] = ()) -> list[psutil.Process]:
    """A process and its descendants, less the subtrees rooted at `exclude` (the client's tree is
    this process's without the server it launched). Empty when `pid` is gone."""
    try:
        root = psutil.Process(pid)
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    if not exclude:
        return members
    parents = {}
    for proc in members:
        try:
            parents[proc.pid] = proc.ppid()
        except psutil.Error:
            parents[proc.pid] = None

    def excluded(p: int | None) -> bool:
        while p is not None and p != pid:
            if p in exclude:
                return True
            p = parents.get(p)
        return False

    return [proc for proc in members if proc.pid == pid or not excluded(proc.pid)]


class ProcessTreeRss:
    """RSS of a process and its descendants (less the subtrees of `exclude`). Listing descendants
    scans all of /proc, so the tree is re-listed at most every `refresh_s`; each RSS read is one
    small /proc file."""

    def __init__(self, pid: int, refresh_s: float = 1.0, exclude: Collection[int] = ()) -> None:
        self.pid = pid
        self.refresh_s = refresh_s
        self.exclude = frozenset(exclude)
        self._procs: list[psutil.Process] = []
        self._container = False
        self._listed_at = -float("inf")

    def _relist(self) -> None:
        self._procs = process_tree(self.pid, self.exclude)
        self._listed_at = time.monotonic()
        try:
            self._container = bool(self._procs) and self._procs[0].name() in CONTAINER_CLIENTS
        except psutil.Error:
            self._container = False

    def _current(self) -> list[psutil.Process]:
        if time.monotonic() - self._listed_at >= self.refresh_s:
            self._relist()
        return self._procs

    def split_kib(self) -> RssSplit | None:
        """The tree's RSS and its split, one /proc/<pid>/status read per process; a container
        client's tree has its RSS but no split (its memory is not the server's)."""
        procs = self._current()
        total = sum_rss([found for proc in procs if (found := read_status_rss(proc.pid))])
        if total is None or not self._container:
            return total
        return RssSplit(total.rss_kib, None, None, None)

    def rss_kib(self) -> int | None:
        """The tree's RSS alone (VmRSS, the same reading as `split_kib`'s)."""
        total = self.split_kib()
        return total.rss_kib if total else None
