"""Memory telemetry: MemAvailable from /proc/meminfo, server and client process-tree RSS, GPU
memory (NVML), sampled in a thread from before launch until after teardown, each sample tagged
with its phase; and a watchdog that kills the server below a MemAvailable floor."""

from __future__ import annotations

import csv
import statistics
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from ..atomic import atomic_open

KIB_PER_GIB = 2**20
PHASES = ("baseline", "load", "warmup", "bench", "teardown")
AFTER_LAUNCH = PHASES[1:]


@dataclass(frozen=True)
class MemorySample:
    t: float
    phase: str
    mem_available_kib: int
    server_rss_kib: int | None
    gpu_used_mib: float | None
    client_rss_kib: int | None = None  # this process's tree without the server's


def read_mem_available_kib(path: str = "/proc/meminfo") -> int:
    """MemAvailable straight from the kernel: no subprocess, a few microseconds."""
    with open(path, "rb") as handle:
        for line in handle:
            if line.startswith(b"MemAvailable:"):
                return int(line.split()[1])
    raise RuntimeError(f"{path} has no MemAvailable line")


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
        self._listed_at = -float("inf")

    def _relist(self) -> None:
        self._procs = process_tree(self.pid, self.exclude)
        self._listed_at = time.monotonic()

    def rss_kib(self) -> int | None:
        if time.monotonic() - self._listed_at >= self.refresh_s:
            self._relist()
        if not self._procs:
            return None
        total = 0
        for proc in self._procs:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        return total // 1024


class GpuMemory:
    """Used GPU memory summed over devices via NVML; unavailable -> None, with the reason."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.note = ""
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self.handles = [
                pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
            ]
            if not self.handles:
                self.note = "NVML found no GPU"
        except Exception as exc:  # no library, no driver, no GPU: all mean "no figure"
            self.note = f"no NVML: {type(exc).__name__}"

    def used_mib(self) -> float | None:
        if not self.handles:
            return None
        try:
            return sum(self._nvml.nvmlDeviceGetMemoryInfo(h).used for h in self.handles) / 2**20
        except Exception:
            # Unified-memory machines (GB10) answer "not supported" here.
            self.note = "NVML reports no memory figure on this device (unified memory?)"
            return None

    def describe(self) -> list[dict[str, Any]]:
        out = []
        for handle in self.handles:
            try:
                out.append(
                    {
                        "name": self._nvml.nvmlDeviceGetName(handle),
                        "driver": self._nvml.nvmlSystemGetDriverVersion(),
                    }
                )
            except Exception:
                continue
        return out


class MemorySampler:
    """Samples every `interval_s` in a daemon thread; `phase` is set by the orchestrator."""

    def __init__(
        self,
        interval_s: float = 0.5,
        floor_kib: int | None = None,
        on_floor: Callable[[MemorySample], None] | None = None,
        gpu: GpuMemory | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.floor_kib = floor_kib
        self.on_floor = on_floor
        self.gpu = gpu if gpu is not None else GpuMemory()
        self.samples: list[MemorySample] = []
        self.phase = "baseline"
        self._tree: ProcessTreeRss | None = None
        self._client: ProcessTreeRss | None = None
        self.tripped: MemorySample | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
        self._t0 = time.monotonic()

    def sample(self) -> MemorySample:
        sample = MemorySample(
            t=time.monotonic() - self._t0,
            phase=self.phase,
            mem_available_kib=read_mem_available_kib(),
            server_rss_kib=self._tree.rss_kib() if self._tree else None,
            gpu_used_mib=self.gpu.used_mib(),
            client_rss_kib=self._client.rss_kib() if self._client else None,
        )
        self.samples.append(sample)
        if (
            self.floor_kib is not None
            and self.tripped is None
            and sample.mem_available_kib < self.floor_kib
        ):
            self.tripped = sample
            if self.on_floor:
                self.on_floor(sample)
        return sample

    @property
    def server_pid(self) -> int | None:
        return self._tree.pid if self._tree else None

    @server_pid.setter
    def server_pid(self, pid: int | None) -> None:
        self._tree = ProcessTreeRss(pid) if pid else None

    def watch_client(self, pid: int, exclude: Collection[int] = ()) -> None:
        """Also sample the RSS of the client's tree: `pid` and its descendants but the
        subtrees of `exclude` (the server's processes, when the client launched them)."""
        self._client = ProcessTreeRss(pid, exclude=exclude)

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.sample()
            next_at += self.interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def take_baseline(self, count: int) -> None:
        """Several samples before launch; the running thread then continues the series."""
        for _ in range(max(1, count)):
            self.sample()
            time.sleep(self.interval_s)

    def start(self) -> None:
        self._thread.start()

    def set_phase(self, phase: str) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase}")
        self.sample()  # a sample at every boundary, so short phases are never unseen
        self.phase = phase
        self.sample()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.sample()


def summarize_memory(
    samples: Sequence[MemorySample], interval_s: float, baseline_jitter_gib: float = 0.25
) -> dict[str, Any]:
    """Deltas of MemAvailable against the pre-launch baseline (median), in GiB (2^30), with and
    without the load client's own RSS rise (less_client_peaks)."""
    baseline = [s.mem_available_kib for s in samples if s.phase == "baseline"]
    out: dict[str, Any] = {"interval_s": interval_s, "samples": len(samples)}
    if not baseline:
        return {
            **out,
            "baseline_available_gib": None,
            "peak_delta_gib": None,
            "load_peak_delta_gib": None,
            "bench_peak_delta_gib": None,
            "peak_delta_less_client_gib": None,
            "client_rss_rise_peak_gib": None,
            "server_rss_peak_gib": None,
            "gpu_used_peak_gib": None,
        }
    base = statistics.median(baseline)

    def peak_delta(phases: Sequence[str]) -> float | None:
        seen = [s.mem_available_kib for s in samples if s.phase in phases]
        return (base - min(seen)) / KIB_PER_GIB if seen else None

    rss = [s.server_rss_kib for s in samples if s.server_rss_kib is not None]
    gpu = [s.gpu_used_mib for s in samples if s.gpu_used_mib is not None]
    spread = (max(baseline) - min(baseline)) / KIB_PER_GIB
    out.update(
        {
            "baseline_available_gib": base / KIB_PER_GIB,
            "baseline_spread_gib": spread,
            "baseline_quiet": spread <= baseline_jitter_gib,
            "peak_delta_gib": peak_delta(AFTER_LAUNCH),
            "load_peak_delta_gib": peak_delta(("load",)),
            "warmup_peak_delta_gib": peak_delta(("warmup",)),
            "bench_peak_delta_gib": peak_delta(("bench",)),
            "server_rss_peak_gib": max(rss) / KIB_PER_GIB if rss else None,
            "gpu_used_peak_gib": max(gpu) / 1024 if gpu else None,
            **less_client_peaks(samples),
        }
    )
    return out


def client_baseline_kib(samples: Sequence[MemorySample]) -> float | None:
    """The client tree's own RSS before launch (median over the baseline samples that have it).
    A client first watched later is measured from its first sample; never watched: None."""
    before = [s.client_rss_kib for s in samples if s.phase == "baseline"]
    before = [kib for kib in before if kib is not None]
    if before:
        return statistics.median(before)
    return next((s.client_rss_kib for s in samples if s.client_rss_kib is not None), None)


def client_rise_kib(sample: MemorySample, baseline_kib: float | None) -> float:
    """How far the client's RSS is above its own baseline at this sample (0 when unknown): the
    part of a MemAvailable drop that is our load client's, not the server's."""
    if baseline_kib is None or sample.client_rss_kib is None:
        return 0
    return sample.client_rss_kib - baseline_kib


def less_client_peaks(samples: Sequence[MemorySample]) -> dict[str, float | None]:
    """The MemAvailable drop below the pre-launch baseline less, at each sample, the load
    client's own RSS rise (`peak_delta_less_client_gib`, the largest after launch), and the
    client's largest rise (`client_rss_rise_peak_gib`), in GiB: what summarize_memory's
    `peak_delta_gib` holds without charging the server for our client."""
    baseline = [s.mem_available_kib for s in samples if s.phase == "baseline"]
    launched = [s for s in samples if s.phase in AFTER_LAUNCH]
    if not baseline or not launched:
        return {"peak_delta_less_client_gib": None, "client_rss_rise_peak_gib": None}
    base = statistics.median(baseline)
    client_base = client_baseline_kib(samples)
    drops = [base - s.mem_available_kib - client_rise_kib(s, client_base) for s in launched]
    rises = [client_rise_kib(s, client_base) for s in launched if s.client_rss_kib is not None]
    return {
        "peak_delta_less_client_gib": max(drops) / KIB_PER_GIB,
        "client_rss_rise_peak_gib": max(rises) / KIB_PER_GIB if rises else None,
    }


def write_memory_csv(path: str, samples: Sequence[MemorySample]) -> None:
    with atomic_open(path) as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["t", "phase", "mem_available_kib", "server_rss_kib", "gpu_used_mib", "client_rss_kib"]
        )
        for s in samples:
            writer.writerow(
                [
                    f"{s.t:.3f}",
                    s.phase,
                    s.mem_available_kib,
                    "" if s.server_rss_kib is None else s.server_rss_kib,
                    "" if s.gpu_used_mib is None else f"{s.gpu_used_mib:.1f}",
                    "" if s.client_rss_kib is None else s.client_rss_kib,
                ]
            )
