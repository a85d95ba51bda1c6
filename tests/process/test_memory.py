"""Memory telemetry: delta/phase arithmetic on recorded samples, and the sampler and watchdog
against a real child process that allocates a known amount."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import psutil
import pytest

from workflow_scripts.process.memory import (
    GpuMemory,
    MemorySample,
    MemorySampler,
    delta_understates,
    energy_series,
    less_client_peaks,
    read_mem_available_kib,
    summarize_memory,
    understates_note,
    write_memory_csv,
)
from workflow_scripts.process.rss import RssSplit, parse_status_rss, sum_rss

MIB = 1024  # KiB


def sample(t, phase, avail_mib, rss_mib=None, gpu_mib=None):
    return MemorySample(
        t, phase, avail_mib * MIB, None if rss_mib is None else rss_mib * MIB, gpu_mib
    )


def test_deltas_per_phase_against_the_median_baseline():
    samples = [
        sample(0.0, "baseline", 10_000),
        sample(0.5, "baseline", 10_100),
        sample(1.0, "baseline", 9_900),  # median 10,000 MiB
        sample(1.5, "load", 9_000, 900),
        sample(2.0, "load", 8_976, 1000),
        sample(2.5, "warmup", 8_900, 1100),
        sample(3.0, "bench", 8_000, 2000),
        sample(3.5, "bench", 8_500, 1500),
        sample(4.0, "teardown", 9_950),
    ]
    mem = summarize_memory(samples, interval_s=0.5)
    gib = 1024  # MiB
    assert mem["baseline_available_gib"] == pytest.approx(10_000 / gib)
    assert mem["load_peak_delta_gib"] == pytest.approx(1_024 / gib)
    assert mem["warmup_peak_delta_gib"] == pytest.approx(1_100 / gib)
    assert mem["bench_peak_delta_gib"] == pytest.approx(2_000 / gib)
    assert mem["peak_delta_gib"] == pytest.approx(2_000 / gib)
    assert mem["server_rss_peak_gib"] == pytest.approx(2_000 / gib)
    assert mem["gpu_used_peak_gib"] is None
    assert mem["baseline_spread_gib"] == pytest.approx(200 / gib)
    assert mem["baseline_quiet"] is True


def test_a_moving_baseline_is_flagged_and_no_baseline_gives_nulls():
    moving = [sample(0, "baseline", 10_000), sample(1, "baseline", 9_000), sample(2, "load", 8_000)]
    assert summarize_memory(moving, 1.0)["baseline_quiet"] is False
    empty = summarize_memory([sample(0, "load", 5)], 1.0)
    assert empty["peak_delta_gib"] is None and empty["baseline_available_gib"] is None


def test_gpu_peak_is_reported_in_gib():
    samples = [sample(0, "baseline", 100), sample(1, "bench", 90, gpu_mib=81_920.0)]
    assert summarize_memory(samples, 1.0)["gpu_used_peak_gib"] == pytest.approx(80.0)


def with_client(t, phase, avail_mib, client_mib, server_mib=None):
    """A sample with the load client's tree RSS (this process without the server)."""
    server_kib = None if server_mib is None else server_mib * MIB
    client_kib = None if client_mib is None else client_mib * MIB
    return MemorySample(t, phase, avail_mib * MIB, server_kib, None, client_kib)


def test_the_load_clients_own_growth_is_not_charged_to_the_server():
    """The server takes 800, 900, 1000, 950 MiB; the client (100 MiB before launch) rises by 0,
    100, 300, 500 MiB; MemAvailable drops by the sum. The drop holds the client, the drop less
    the client does not: 1000 MiB, taken per sample (not the highest drop less the highest
    rise, 1450 - 500)."""
    gib = 1024  # MiB
    samples = [
        with_client(0.0, "baseline", 10_000, 100),
        with_client(0.5, "baseline", 10_000, 100),
        with_client(1.0, "load", 10_000 - 800, 100, 800),
        with_client(1.5, "warmup", 10_000 - 1_000, 200, 900),
        with_client(2.0, "bench", 10_000 - 1_300, 400, 1_000),
        with_client(2.5, "bench", 10_000 - 1_450, 600, 950),
        with_client(3.0, "teardown", 10_000, 100),
    ]
    mem = summarize_memory(samples, interval_s=0.5)
    assert mem["peak_delta_gib"] == pytest.approx(1_450 / gib)  # the seeds' measure, as before
    assert mem["bench_peak_delta_gib"] == pytest.approx(1_450 / gib)
    assert mem["server_rss_peak_gib"] == pytest.approx(1_000 / gib)
    assert less_client_peaks(samples) == {
        "peak_delta_less_client_gib": pytest.approx(1_000 / gib),
        "client_rss_rise_peak_gib": pytest.approx(500 / gib),
    }
    assert mem["peak_delta_less_client_gib"] == pytest.approx(1_000 / gib)  # in metrics.json


def test_a_client_first_sampled_after_launch_is_measured_from_its_first_sample():
    """Runs from before the client was watched from the baseline on: its first figure is its
    baseline. With no client figure at all, nothing is taken off the drop."""
    gib = 1024  # MiB
    late = [
        with_client(0.0, "baseline", 10_000, None),
        with_client(1.0, "load", 9_000, None, 1_000),
        with_client(2.0, "warmup", 8_900, 250, 1_000),
        with_client(3.0, "bench", 8_700, 450, 1_000),
    ]
    peaks = less_client_peaks(late)
    assert peaks["client_rss_rise_peak_gib"] == pytest.approx(200 / gib)
    assert peaks["peak_delta_less_client_gib"] == pytest.approx(1_100 / gib)
    unwatched = [sample(0, "baseline", 10_000), sample(1, "bench", 9_000, 1_000)]
    peaks = less_client_peaks(unwatched)
    assert peaks["peak_delta_less_client_gib"] == summarize_memory(unwatched, 1.0)["peak_delta_gib"]
    assert peaks["client_rss_rise_peak_gib"] is None
    nothing = {"peak_delta_less_client_gib": None, "client_rss_rise_peak_gib": None}
    assert less_client_peaks([sample(0, "load", 5)]) == nothing  # no baseline
    assert less_client_peaks([sample(0, "baseline", 5)]) == nothing  # never launched


def test_reads_mem_available_from_the_kernel(tmp_path):
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal: 100 kB\nMemFree: 10 kB\nMemAvailable:   4242 kB\n")
    assert read_mem_available_kib(str(fake)) == 4242
    assert read_mem_available_kib() > 0


def allocate(mib: int) -> str:
    """A child program that touches every page of `mib` MiB (bytes of ones), then waits."""
    return (
        f"import time\nblock = b'\\x01' * ({mib} * 2**20)\n"
        "print('allocated', flush=True)\ntime.sleep(60)\n"
    )


def _start_allocator() -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", allocate(512)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "allocated"
    return proc


def _meminfo_mib(*keys: str) -> dict[str, float]:
    values = {}
    with open("/proc/meminfo") as handle:
        for line in handle:
            name, rest = line.split(":", 1)
            if name in keys:
                values[name] = int(rest.split()[0]) / 1024
    return values


def _measure_allocation() -> tuple[dict, list[MemorySample], float]:
    """Sample a 512 MiB child from before its start to after its end. Returns the summary, the
    samples, and the memory that came from outside while the child held its own (MiB): the
    rise of anonymous pages minus the fall of free pages, ~0 on a machine that owns its RAM.
    The kernel folds its counters every vm.stat_interval (1 s): the child holds 2.5 s."""
    sampler = MemorySampler(interval_s=0.1)
    sampler.take_baseline(5)
    sampler.start()
    before = _meminfo_mib("MemFree", "AnonPages")
    sampler.set_phase("load")
    proc = _start_allocator()
    try:
        sampler.server_pid = proc.pid
        time.sleep(2.5)
        during = _meminfo_mib("MemFree", "AnonPages")
    finally:
        proc.kill()
        proc.wait()
        sampler.set_phase("teardown")
        sampler.stop()
    mem = summarize_memory(sampler.samples, sampler.interval_s)
    from_outside = (during["AnonPages"] - before["AnonPages"]) - (
        before["MemFree"] - during["MemFree"]
    )
    return mem, sampler.samples, from_outside


def test_sampler_sees_a_known_allocation():
    """512 MiB in a child: RSS (process-local) within 5 %, always. MemAvailable is machine-wide,
    and on a VM whose host balloons memory it moves by itself (seen here: free memory rising by
    hundreds of MiB while a 512 MiB allocation was made, so the allocation was invisible in
    MemAvailable); so its delta is checked, within 25 %, on a try where less than 64 MiB came
    from outside the guest's own accounting. Up to 5 tries."""
    seen = []
    for _ in range(5):
        mem, samples, from_outside = _measure_allocation()
        assert mem["server_rss_peak_gib"] * 1024 == pytest.approx(512, rel=0.05)
        gaps = [b.t - a.t for a, b in zip(samples, samples[1:], strict=False)]
        assert max(gaps) < 0.1 * 10  # never a long hole in the series
        seen.append(round(from_outside))
        if abs(from_outside) < 64 and mem["baseline_quiet"]:
            assert mem["load_peak_delta_gib"] * 1024 == pytest.approx(512, rel=0.25)
            return
    pytest.skip(
        f"memory came from outside the guest on every try (MiB: {seen}): this "
        "machine's memory is ballooned by its host; RSS was checked"
    )


def _client_that_grows(mib: int) -> subprocess.Popen:
    """A child standing in for the load client: it touches `mib` MiB once it reads a line."""
    program = f"import sys, time\nsys.stdin.readline()\n{allocate(mib)}"
    return subprocess.Popen(
        [sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _measure_server_and_client() -> tuple[dict, float]:
    """A 512 MiB server child, and a client child watched from the baseline on that grows by
    256 MiB during the bench. Returns the summary and the memory that came from outside (MiB),
    as in _measure_allocation."""
    client = _client_that_grows(256)
    sampler = MemorySampler(interval_s=0.1)
    sampler.watch_client(client.pid)
    server = None
    try:
        sampler.take_baseline(5)
        sampler.start()
        before = _meminfo_mib("MemFree", "AnonPages")
        sampler.set_phase("load")
        server = _start_allocator()
        sampler.server_pid = server.pid
        sampler.set_phase("bench")
        client.stdin.write("go\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "allocated"
        time.sleep(2.5)
        during = _meminfo_mib("MemFree", "AnonPages")
    finally:
        for proc in (client, server):
            if proc is not None:
                proc.kill()
                proc.wait()
        sampler.set_phase("teardown")
        sampler.stop()
    mem = summarize_memory(sampler.samples, sampler.interval_s)
    mem.update(less_client_peaks(sampler.samples))
    from_outside = (during["AnonPages"] - before["AnonPages"]) - (
        before["MemFree"] - during["MemFree"]
    )
    return mem, from_outside


def test_a_growing_client_is_sampled_apart_from_the_server():
    """Real processes: the client's 256 MiB shows as its RSS rise (within 5 %) and never in the
    server's RSS; on a try where MemAvailable is not moved from outside (see
    test_sampler_sees_a_known_allocation), the drop holds both (768 MiB) and the drop less the
    client only the server's 512 MiB, within 25 %. Up to 5 tries."""
    seen = []
    for _ in range(5):
        mem, from_outside = _measure_server_and_client()
        assert mem["client_rss_rise_peak_gib"] * 1024 == pytest.approx(256, rel=0.05)
        assert mem["server_rss_peak_gib"] * 1024 == pytest.approx(512, rel=0.05)
        seen.append(round(from_outside))
        if abs(from_outside) < 64 and mem["baseline_quiet"]:
            assert mem["peak_delta_gib"] * 1024 == pytest.approx(768, rel=0.25)
            assert mem["peak_delta_less_client_gib"] * 1024 == pytest.approx(512, rel=0.25)
            return
    pytest.skip(f"memory came from outside the guest on every try (MiB: {seen}); RSS was checked")


def test_watchdog_kills_the_process_below_the_floor():
    """A child holding 512 MiB; the floor is set above what is available, so the first sample
    crosses it: the watchdog kills the child at once and records the sample that tripped."""
    proc = _start_allocator()
    try:
        floor_kib = read_mem_available_kib() + 256 * MIB
        sampler = MemorySampler(
            interval_s=0.05, floor_kib=floor_kib, on_floor=lambda _sample: proc.kill()
        )
        sampler.server_pid = proc.pid
        sampler.start()
        proc.wait(timeout=10)  # returns only once the watchdog killed it
        sampler.stop()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sampler.tripped is not None
    assert sampler.tripped.mem_available_kib < floor_kib
    assert sampler.tripped.server_rss_kib >= 500 * MIB
    assert proc.returncode == -9
    assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == "zombie"


@pytest.mark.slow
def test_a_cell_below_its_memory_floor_fails_and_leaves_no_server(tmp_path):
    """The real pipeline path: a floor above all the machine's memory trips as soon as the
    server starts; the server is killed, the cell is `failed` with reason `memory watchdog`,
    and what was measured (memory samples) is kept."""
    from tests.support.pipeline import tiny_config
    from workflow_scripts.cell.run import CellInputs, run_cell
    from workflow_scripts.config.matrix import build_cells, validate_config
    from workflow_scripts.engines.provision import provision
    from workflow_scripts.weights.fetch import fetch_weights

    config = tiny_config([{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"}])
    config["memory"]["floor_gib"] = 100_000
    (cell,) = build_cells(validate_config(config))
    manifest = fetch_weights(cell.weights, tmp_path / "weights.json")
    result = run_cell(
        CellInputs(cell, tmp_path / "cell", provision(cell.engine, cell.engine_spec), manifest)
    )
    assert result["status"] == "failed"
    assert result["reason"].startswith("ServerError: memory watchdog")
    assert result["mem"]["samples"] > 0
    rows = (tmp_path / "cell" / "memory.csv").read_text().splitlines()
    assert len(rows) > 1
    launched = result["server_command"]
    assert launched[0].endswith("llama-server")
    survivors = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == launched]
    assert not survivors


# The server's resident memory split (issue #34): anonymous vs file-backed pages, from
# /proc/<pid>/status, summed over the server's tree; and when the MemAvailable drop understates it.

STATUS_TEXT = """Name:\tllama-server
State:\tS (sleeping)
VmPeak:\t 1234567 kB
VmRSS:\t  512000 kB
RssAnon:\t  102400 kB
RssFile:\t  409000 kB
RssShmem:\t     600 kB
VmData:\t  200000 kB
Threads:\t4
"""


def test_status_text_gives_the_rss_split():
    assert parse_status_rss(STATUS_TEXT) == RssSplit(512_000, 102_400, 409_000, 600)
    kernel_thread = "Name:\tkthreadd\nState:\tS (sleeping)\nThreads:\t1\n"
    assert parse_status_rss(kernel_thread) is None  # no memory of its own: not counted
    old_kernel = "Name:\tx\nVmRSS:\t 2048 kB\n"  # before Linux 4.5: no split
    assert parse_status_rss(old_kernel) == RssSplit(2048, None, None, None)


def test_a_tree_sums_each_part_and_an_unknown_part_stays_unknown():
    parent, worker = RssSplit(100, 60, 40, 0), RssSplit(300, 250, 40, 10)
    assert sum_rss([parent, worker]) == RssSplit(400, 310, 80, 10)
    assert sum_rss([parent, RssSplit(5, None, None, None)]) == RssSplit(105, None, None, None)
    assert sum_rss([]) is None


def split(t, phase, avail_mib, anon_mib=None, file_mib=None):
    """A sample with the server tree's RSS split (MiB); RSS is their sum."""
    known = anon_mib is not None and file_mib is not None
    return MemorySample(
        t,
        phase,
        avail_mib * MIB,
        (anon_mib + file_mib) * MIB if known else None,
        None,
        server_rss_anon_kib=None if anon_mib is None else anon_mib * MIB,
        server_rss_file_kib=None if file_mib is None else file_mib * MIB,
        server_rss_shmem_kib=0 if known else None,
    )


def test_a_drop_below_the_servers_anonymous_memory_is_flagged():
    """Gemma 3 270M on llama.cpp, as the issue saw it: MemAvailable fell 6 MiB (and rose 140 MiB
    while loading), the server held 400 MiB anonymous and 90 MiB of its mmap'd model file. The
    drop stays as it was; the split is beside it and the drop is marked as understating."""
    gib = 1024  # MiB
    samples = [
        split(0.0, "baseline", 10_000),
        split(0.5, "baseline", 10_000),
        split(1.0, "load", 10_140, 200, 90),
        split(1.5, "bench", 9_994, 400, 90),
        split(2.0, "teardown", 10_000),
    ]
    mem = summarize_memory(samples, 0.5)
    assert mem["peak_delta_gib"] == pytest.approx(6 / gib)
    assert mem["load_peak_delta_gib"] == pytest.approx(-140 / gib)
    assert mem["server_rss_anon_peak_gib"] == pytest.approx(400 / gib)
    assert mem["server_rss_file_peak_gib"] == pytest.approx(90 / gib)
    assert mem["server_rss_shmem_peak_gib"] == 0
    assert mem["delta_understates"] is True
    note = understates_note(mem, mem["peak_delta_gib"])
    assert "understates" in note and "0.39 GiB of anonymous memory" in note
    assert "page cache" in note


def test_a_drop_that_holds_the_anonymous_memory_is_not_flagged():
    samples = [split(0, "baseline", 10_000), split(1, "bench", 9_550, 400, 90)]
    mem = summarize_memory(samples, 1.0)
    assert mem["delta_understates"] is False
    assert understates_note(mem, mem["peak_delta_gib"]) == ""


def test_understating_rules_noise_negative_and_unknown():
    assert delta_understates(0.006, 0.4) is True
    assert delta_understates(0.39, 0.4) is False  # within 5 % of the anonymous peak: noise
    assert delta_understates(0.2, 0.4, baseline_spread_gib=0.25) is False  # a noisy baseline
    assert delta_understates(-0.14, None) is True  # negative says nothing of the server
    assert delta_understates(0.3, None) is None  # no anonymous figure (a container unseen)
    assert delta_understates(None, 0.4) is None


def test_a_container_servers_split_is_null_not_zero():
    """No sample knows the split (a `docker run` client's tree): the peaks are null, and the
    drop is not held against a figure nobody measured."""
    samples = [split(0, "baseline", 10_000), split(1, "bench", 9_000)]
    mem = summarize_memory(samples, 1.0)
    for key in ("server_rss_anon_peak_gib", "server_rss_file_peak_gib"):
        assert mem[key] is None
    assert mem["delta_understates"] is None
    assert summarize_memory([split(0, "load", 5)], 1.0)["server_rss_anon_peak_gib"] is None


def test_memory_csv_keeps_its_columns_and_appends_the_split(tmp_path):
    path = tmp_path / "memory.csv"
    write_memory_csv(str(path), [split(0.5, "bench", 9_000, 400, 90)])
    header, row = path.read_text().splitlines()
    old = ["t", "phase", "mem_available_kib", "server_rss_kib", "gpu_used_mib", "client_rss_kib"]
    assert header.split(",")[:6] == old
    assert header.split(",")[6:9] == [
        "server_rss_anon_kib",
        "server_rss_file_kib",
        "server_rss_shmem_kib",
    ]
    assert row.split(",")[6:9] == [str(400 * MIB), str(90 * MIB), "0"]


class Probe:
    """An energy source as the sampler sees it: a power reading and a counter that move by a
    known step at each call; None once it is told to fail."""

    def __init__(self) -> None:
        self.calls = 0
        self.failing = False

    def power_w(self) -> float | None:
        return None if self.failing else 100.0 + self.calls

    def energy_j(self) -> float | None:
        if self.failing:
            return None
        self.calls += 1
        return 50.0 * (self.calls - 1)


def test_the_sampler_takes_the_energy_sources_readings_and_appends_their_columns(tmp_path):
    probe = Probe()
    sampler = MemorySampler(interval_s=0.1, gpu=GpuMemory(), energy=probe)
    first, second = sampler.sample(), sampler.sample()
    probe.failing = True
    third = sampler.sample()
    assert [(s.power_w, s.energy_j) for s in (first, second, third)] == [
        (100.0, 0.0),
        (101.0, 50.0),
        (None, None),
    ]
    assert time.time() - 5 < sampler.epoch_origin_s <= time.time()
    path = tmp_path / "memory.csv"
    write_memory_csv(str(path), [first, second, third])
    header, *rows = path.read_text().splitlines()
    assert header.split(",")[-2:] == ["power_w", "energy_j"]
    assert [row.split(",")[-2:] for row in rows] == [
        ["100.000", "0.000"],
        ["101.000", "50.000"],
        ["", ""],
    ]
    series = energy_series(sampler.samples, 1000.0, "energy_j")
    assert series == ((1000.0 + first.t, 0.0), (1000.0 + second.t, 50.0))
    assert MemorySampler(interval_s=0.1, gpu=GpuMemory()).sample().power_w is None


def _child(program: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _split_of(pid: int) -> MemorySample:
    sampler = MemorySampler(interval_s=0.1)
    sampler.server_pid = pid
    return sampler.sample()


def test_mmapd_pages_count_as_file_backed_and_allocations_as_anonymous(tmp_path):
    """Real processes: one maps a 128 MiB file read-only (as llama.cpp maps a model) and touches
    every page: its RssFile rises by the file, its RssAnon does not; one allocates 128 MiB: its
    RssAnon rises by them, its RssFile does not."""
    size_mib = 128
    model = tmp_path / "model.bin"
    with open(model, "wb") as handle:
        for _ in range(size_mib):
            handle.write(b"\x01" * 2**20)
    mapper = (
        "import mmap, sys, time\n"
        f"f = open({str(model)!r}, 'rb')\n"
        "m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\n"
        "total = sum(m[i] for i in range(0, len(m), 4096))\n"
        "print('ready', flush=True)\ntime.sleep(60)\n"
    )
    allocator = allocate(size_mib).replace("'allocated'", "'ready'")
    idle = "import time\nprint('ready', flush=True)\ntime.sleep(60)\n"
    procs = []
    try:
        procs = [_child(idle), _child(mapper), _child(allocator)]
        base, mapped, anon = (_split_of(p.pid) for p in procs)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    for found in (base, mapped, anon):
        total = found.server_rss_anon_kib + found.server_rss_file_kib
        assert total + found.server_rss_shmem_kib == found.server_rss_kib
    file_rise = (mapped.server_rss_file_kib - base.server_rss_file_kib) / MIB
    assert file_rise == pytest.approx(size_mib, rel=0.05)
    assert abs(mapped.server_rss_anon_kib - base.server_rss_anon_kib) / MIB < 16
    anon_rise = (anon.server_rss_anon_kib - base.server_rss_anon_kib) / MIB
    assert anon_rise == pytest.approx(size_mib, rel=0.05)
    assert abs(anon.server_rss_file_kib - base.server_rss_file_kib) / MIB < 16


@pytest.mark.standin
def test_a_tree_rooted_at_a_container_client_has_no_split(tmp_path):
    """Stand-in for `docker run` (no docker here): `sleep` started under the name `docker`. Its
    tree holds the client, not the server in the container: RSS as before, the split null."""
    client = tmp_path / "docker"
    client.symlink_to(shutil.which("sleep"))
    proc = subprocess.Popen([str(client), "60"])
    try:
        time.sleep(0.2)
        found = _split_of(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert found.server_rss_kib and found.server_rss_kib > 0
    assert found.server_rss_anon_kib is None and found.server_rss_file_kib is None


class OverlapProbe:
    """An energy probe that notes when two samples read it at once (a read takes 2 ms)."""

    def __init__(self) -> None:
        self.inside = 0
        self.overlaps = 0
        self.reads = 0

    def power_w(self) -> float | None:
        return None

    def energy_j(self) -> float | None:
        self.inside += 1
        self.overlaps += self.inside > 1
        time.sleep(0.002)
        self.reads += 1
        self.inside -= 1
        return float(self.reads)


def test_the_thread_and_the_orchestrator_take_samples_one_at_a_time():
    """The sampler's thread samples every 1 ms while the orchestrator marks phases: no two
    samples read the energy probe at once, and the series' energy readings are in the order
    taken. Before, a phase mark's read could be added to the counter's running total after a
    later read of the thread's, and the total refused it as a counter that went down (the
    stand-in energy pipeline failed a cell with it under load)."""
    probe = OverlapProbe()
    sampler = MemorySampler(interval_s=0.001, energy=probe)
    sampler.start()
    try:
        for _ in range(40):
            sampler.set_phase("bench")
            sampler.set_phase("warmup")
    finally:
        sampler.stop()
    readings = [s.energy_j for s in sampler.samples]
    assert probe.overlaps == 0 and probe.reads >= 80
    assert readings == sorted(readings)
