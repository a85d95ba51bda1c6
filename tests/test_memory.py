"""Memory telemetry: delta/phase arithmetic on recorded samples, and the sampler and watchdog
against a real child process that allocates a known amount."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from workflow_scripts.memory import (
    KIB_PER_GIB,
    MemorySample,
    MemorySampler,
    read_mem_available_kib,
    summarize_memory,
)

MIB = 1024  # KiB


def sample(t, phase, avail_mib, rss_mib=None, gpu_mib=None):
    return MemorySample(t, phase, avail_mib * MIB, None if rss_mib is None else rss_mib * MIB,
                        gpu_mib)


def test_deltas_per_phase_against_the_median_baseline():
    samples = [
        sample(0.0, "baseline", 10_000), sample(0.5, "baseline", 10_100),
        sample(1.0, "baseline", 9_900),  # median 10,000 MiB
        sample(1.5, "load", 9_000, 900), sample(2.0, "load", 8_976, 1000),
        sample(2.5, "warmup", 8_900, 1100),
        sample(3.0, "bench", 8_000, 2000), sample(3.5, "bench", 8_500, 1500),
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


def test_reads_mem_available_from_the_kernel(tmp_path):
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal: 100 kB\nMemFree: 10 kB\nMemAvailable:   4242 kB\n")
    assert read_mem_available_kib(str(fake)) == 4242
    assert read_mem_available_kib() > 0


def allocate(mib: int) -> str:
    """A child program that touches every page of `mib` MiB (bytes of ones), then waits."""
    return (f"import time\nblock = b'\\x01' * ({mib} * 2**20)\n"
            "print('allocated', flush=True)\ntime.sleep(60)\n")


def _start_allocator() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", allocate(512)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "allocated"
    return proc


def test_sampler_sees_a_known_allocation():
    """512 MiB in a child: RSS within 5 %, MemAvailable delta within 25 % (other processes on
    the machine move MemAvailable too; RSS is the tight check)."""
    sampler = MemorySampler(interval_s=0.05)
    sampler.take_baseline(5)
    sampler.start()
    sampler.set_phase("load")
    proc = _start_allocator()
    try:
        sampler.server_pid = proc.pid
        time.sleep(0.5)
        sampler.set_phase("teardown")
    finally:
        proc.kill()
        proc.wait()
        sampler.stop()
    mem = summarize_memory(sampler.samples, sampler.interval_s)
    assert mem["server_rss_peak_gib"] * 1024 == pytest.approx(512, rel=0.05)
    assert mem["load_peak_delta_gib"] * 1024 == pytest.approx(512, rel=0.25)
    gaps = [b.t - a.t for a, b in zip(sampler.samples, sampler.samples[1:], strict=False)]
    assert max(gaps) < 0.05 * 20  # never a long hole in the series


def test_watchdog_kills_the_process_below_the_floor():
    """The floor sits 1 GiB under the current MemAvailable and the child takes 2 GiB, so other
    processes on the machine are unlikely to trip it first."""
    floor_kib = read_mem_available_kib() - 1024 * MIB
    proc = None

    def kill(_sample):
        if proc is not None:
            proc.kill()

    sampler = MemorySampler(interval_s=0.02, floor_kib=floor_kib, on_floor=kill)
    sampler.take_baseline(2)
    sampler.start()
    try:
        proc = subprocess.Popen([sys.executable, "-c", allocate(2048)], stdout=subprocess.PIPE)
        proc.wait(timeout=30)  # returns only once the watchdog killed it
    finally:
        sampler.stop()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
    assert sampler.tripped is not None
    assert sampler.tripped.mem_available_kib < floor_kib
    assert proc.returncode == -9
    assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == "zombie"
    assert KIB_PER_GIB == 2**20
