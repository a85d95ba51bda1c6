"""Memory telemetry: MemAvailable from /proc/meminfo, server and client process-tree RSS (the
server's split into anonymous, file-backed and shared-memory pages), GPU memory (NVML), sampled in
a thread from before launch until after teardown, each sample tagged with its phase; and a
watchdog that kills the server below a MemAvailable floor. Beside them, where the cell gives an
energy source (`EnergyProbe`, energy/), its power reading and its counter at each sample."""

from __future__ import annotations

import csv
import statistics
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..atomic import atomic_open
from .rss import ProcessTreeRss

KIB_PER_GIB = 2**20
# The MemAvailable drop "understates" the server when it is negative, or below the server's
# anonymous memory by more than the noise: the baseline's spread, this share of the anonymous
# peak, or UNDERSTATES_MIN_GIB, whichever is largest.
UNDERSTATES_SHARE = 0.05
UNDERSTATES_MIN_GIB = 1 / 64
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
    # The server tree's RSS split as /proc/<pid>/status gives it: anonymous pages (heap, KV
    # cache: memory only the server holds), file-backed pages (mmap'd weights, libraries: page
    # cache, which MemAvailable counts as available) and shared memory (tmpfs, /dev/shm).
    # None: not known (a container client's tree, or no server yet).
    server_rss_anon_kib: int | None = None
    server_rss_file_kib: int | None = None
    server_rss_shmem_kib: int | None = None
    # The energy source's power reading (W, summed over the devices it reads) and its counter
    # (J since the sampler's first reading); None where it gives none, or none was given.
    power_w: float | None = None
    energy_j: float | None = None


class EnergyProbe(Protocol):
    """What the sampler reads of an energy source (energy.source.EnergySource): each returns
    None when it has no figure, and never raises."""

    def power_w(self) -> float | None: ...

    def energy_j(self) -> float | None: ...


def read_mem_available_kib(path: str = "/proc/meminfo") -> int:
    """MemAvailable straight from the kernel: no subprocess, a few microseconds."""
    with open(path, "rb") as handle:
        for line in handle:
            if line.startswith(b"MemAvailable:"):
                return int(line.split()[1])
    raise RuntimeError(f"{path} has no MemAvailable line")


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
    """Samples every `interval_s` in a daemon thread; `phase` is set by the orchestrator. A
    sample's `t` is seconds from the sampler's start; `epoch_origin_s` is that start in epoch
    seconds (what an energy window is held against). The thread and the orchestrator (a phase
    mark, the baseline) both take samples: one at a time, so the series is in time order and
    the energy counter's running total sees its reads in the order they were taken."""

    def __init__(
        self,
        interval_s: float = 0.5,
        floor_kib: int | None = None,
        on_floor: Callable[[MemorySample], None] | None = None,
        gpu: GpuMemory | None = None,
        energy: EnergyProbe | None = None,
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
        self._one_at_a_time = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
        self.energy = energy
        self._t0 = time.monotonic()
        self.epoch_origin_s = time.time()

    def sample(self) -> MemorySample:
        with self._one_at_a_time:
            return self._sample()

    def _sample(self) -> MemorySample:
        server = self._tree.split_kib() if self._tree else None
        sample = MemorySample(
            t=time.monotonic() - self._t0,
            phase=self.phase,
            mem_available_kib=read_mem_available_kib(),
            server_rss_kib=server.rss_kib if server else None,
            gpu_used_mib=self.gpu.used_mib(),
            client_rss_kib=self._client.rss_kib() if self._client else None,
            server_rss_anon_kib=server.anon_kib if server else None,
            server_rss_file_kib=server.file_kib if server else None,
            server_rss_shmem_kib=server.shmem_kib if server else None,
            power_w=self.energy.power_w() if self.energy else None,
            energy_j=self.energy.energy_j() if self.energy else None,
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
            **server_split_peaks(samples),
            "delta_understates": None,
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
            **server_split_peaks(samples),
        }
    )
    shown = out["peak_delta_less_client_gib"]
    out["delta_understates"] = delta_understates(
        out["peak_delta_gib"] if shown is None else shown,
        out["server_rss_anon_peak_gib"],
        spread,
    )
    return out


def server_split_peaks(samples: Sequence[MemorySample]) -> dict[str, float | None]:
    """The highest anonymous, file-backed and shared-memory RSS of the server's tree over the
    run, in GiB; None where no sample knew it (a container whose processes are not ours)."""

    def peak(values: Sequence[int | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) / KIB_PER_GIB if known else None

    return {
        "server_rss_anon_peak_gib": peak([s.server_rss_anon_kib for s in samples]),
        "server_rss_file_peak_gib": peak([s.server_rss_file_kib for s in samples]),
        "server_rss_shmem_peak_gib": peak([s.server_rss_shmem_kib for s in samples]),
    }


def delta_understates(
    delta_gib: float | None, anon_peak_gib: float | None, baseline_spread_gib: float = 0.0
) -> bool | None:
    """Whether the MemAvailable drop shown as the server's memory understates it: negative
    (another process freed memory meanwhile), or below the server's own anonymous memory by more
    than the noise (its file-backed pages, mmap'd weights, are page cache that MemAvailable
    counts as available). None when there is no drop, or no anonymous figure to hold it to."""
    if delta_gib is None:
        return None
    if delta_gib < 0:
        return True
    if anon_peak_gib is None:
        return None
    slack = max(baseline_spread_gib, UNDERSTATES_SHARE * anon_peak_gib, UNDERSTATES_MIN_GIB)
    return delta_gib + slack < anon_peak_gib


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


# memory.csv's columns: a contract; a new column goes at the end.
MEMORY_CSV_COLUMNS = [
    "t",
    "phase",
    "mem_available_kib",
    "server_rss_kib",
    "gpu_used_mib",
    "client_rss_kib",
    "server_rss_anon_kib",
    "server_rss_file_kib",
    "server_rss_shmem_kib",
    "power_w",
    "energy_j",
]


def write_memory_csv(path: str, samples: Sequence[MemorySample]) -> None:
    with atomic_open(path) as handle:
        writer = csv.writer(handle)
        writer.writerow(MEMORY_CSV_COLUMNS)
        for s in samples:
            writer.writerow(
                [
                    f"{s.t:.3f}",
                    s.phase,
                    s.mem_available_kib,
                    "" if s.server_rss_kib is None else s.server_rss_kib,
                    "" if s.gpu_used_mib is None else f"{s.gpu_used_mib:.1f}",
                    "" if s.client_rss_kib is None else s.client_rss_kib,
                    *[
                        "" if v is None else v
                        for v in (
                            s.server_rss_anon_kib,
                            s.server_rss_file_kib,
                            s.server_rss_shmem_kib,
                        )
                    ],
                    "" if s.power_w is None else f"{s.power_w:.3f}",
                    "" if s.energy_j is None else f"{s.energy_j:.3f}",
                ]
            )


def energy_series(
    samples: Sequence[MemorySample], epoch_origin_s: float, field: str
) -> tuple[tuple[float, float], ...]:
    """(epoch seconds, value) of the samples that have `field` (`power_w` or `energy_j`): the
    series energy/ integrates over a window."""
    pairs = ((epoch_origin_s + s.t, getattr(s, field)) for s in samples)
    return tuple((t, v) for t, v in pairs if v is not None)


def understates_note(mem: Mapping[str, Any], delta_gib: float | None) -> str:
    """Why the MemAvailable drop shown as a cell's memory (`delta_gib`) is not what its server
    holds, when `mem.delta_understates`; "" otherwise. The drop must include the server's
    anonymous pages, so a drop below them (or negative) was offset by memory freed elsewhere;
    and it never includes the file-backed pages (page cache counts as available)."""
    if not mem.get("delta_understates") or delta_gib is None:
        return ""
    anon, file = mem.get("server_rss_anon_peak_gib"), mem.get("server_rss_file_peak_gib")
    what = "negative" if delta_gib < 0 else "below the server's own anonymous memory"
    text = (
        f"the MemAvailable drop ({delta_gib:.2f} GiB) understates the server's memory: it is "
        f"{what}, so memory freed elsewhere on the machine (another process, swap, the host) "
        "offset it during the run"
    )
    if anon is None:
        return text + "; the server's own memory was not seen"
    text += f"; the server held up to {anon:.2f} GiB of anonymous memory"
    if file is not None:
        text += (
            f" and {file:.2f} GiB of file-backed pages (weights mmap'd from the model file: page "
            "cache, which MemAvailable counts as available)"
        )
    return text
