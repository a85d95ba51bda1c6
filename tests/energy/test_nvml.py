"""The NVML reader against the stand-in `pynvml` (tests/fixtures/energy; standin): two devices
whose energy counters follow a known law of time, one of them not the server's."""

from __future__ import annotations

import sys

import pytest

from tests.energy.conftest import Clock
from tests.fixtures.energy.nvml_law import NO_COUNTER_ENV
from workflow_scripts.energy.counters import deltas
from workflow_scripts.energy.meter import Unavailable, idle_baseline, open_source
from workflow_scripts.energy.nvml import (
    MAX_STAMP_SKEW_S,
    STAMPED_NOTE,
    NvmlSource,
    select_devices,
    visible_entries,
)
from workflow_scripts.energy.record import not_measured
from workflow_scripts.energy.samples import integrate_power
from workflow_scripts.energy.source import COUNTER, NVML, POWER_SAMPLES, SourceUnavailable
from workflow_scripts.energy.windows import Window
from workflow_scripts.process.memory import MemorySampler

pytestmark = pytest.mark.standin


def counter_joules(source: NvmlSource, clock, start_s: float, end_s: float) -> float:
    info = source.info()
    clock.now = start_s
    start = source.read()
    clock.now = end_s
    end = source.read()
    return sum(deltas(start, end, info.ranges_raw)) * info.unit_j


def test_the_counter_gives_the_closed_form_joules_of_the_used_device_only(standin_nvml, law, clock):
    """The server sees device 1 (by index, then by a UUID prefix): its joules over 900.5 s
    are the law's integral (1e-6 relative), and device 0's are not in them."""
    start_s, end_s = law.origin_s + 1000.25, law.origin_s + 1900.75
    expected = law.joules(1, start_s, end_s)
    other = law.joules(0, start_s, end_s)
    for visible in ("1", law.devices[1].uuid[:12]):
        source = NvmlSource(visible, clock=clock, module=standin_nvml)
        info = source.info()
        assert (info.source, info.method) == (NVML, COUNTER)
        assert [d["uuid"] for d in info.devices] == [law.devices[1].uuid]
        assert info.unit_j == 1e-3
        assert "lower bound" in info.scope
        joules = counter_joules(source, clock, start_s, end_s)
        assert joules == pytest.approx(expected, rel=1e-6)
        assert abs(joules - expected) < 0.01 * other  # device 0 is not in it
    every = NvmlSource(None, clock=clock, module=standin_nvml)
    assert len(every.info().devices) == 2
    both = counter_joules(every, clock, start_s, end_s)
    assert both == pytest.approx(expected + other, rel=1e-6)


def test_the_idle_baseline_reads_the_counter_over_a_window_of_its_own(standin_nvml, law, clock):
    source = NvmlSource("0", clock=clock, module=standin_nvml)
    clock.now = (
        law.origin_s + 400.0
    )  # a whole number of periods of device 0 (20 s): mean idle+amp/2
    idle = idle_baseline(source, seconds=60.0, sleep=clock.sleep, clock=clock)
    assert (idle.window.start_s, idle.window.end_s) == (law.origin_s + 400.0, law.origin_s + 460.0)
    assert idle.watts == pytest.approx(
        law.joules(0, idle.window.start_s, idle.window.end_s) / 60.0, rel=1e-6
    )
    assert idle.watts == pytest.approx(80.0 + 400.0 / 2, rel=1e-6)


def test_a_counter_not_supported_falls_back_to_power_samples_within_their_stated_error(
    standin_nvml, law, clock, monkeypatch
):
    """The counter answers "not supported": the method is `power samples`, the reads give
    nothing, and power sampled every 0.5 s integrates to the law's joules within the error the
    integral states."""
    monkeypatch.setenv(NO_COUNTER_ENV, "1")
    source = NvmlSource("1", clock=clock, module=standin_nvml)
    info = source.info()
    assert info.method == POWER_SAMPLES
    assert info.unit_j is None
    assert source.read() is None
    assert "not supported" in info.notes[0]
    series = []
    for k in range(0, 241):
        clock.now = law.origin_s + 50.0 + 0.5 * k
        series.append((clock.now, source.power_w()))
    window = Window(law.origin_s + 50.2, law.origin_s + 169.9)
    integral = integrate_power(series, window, 0.5)
    expected = law.joules(1, window.start_s, window.end_s)
    assert integral.valid
    assert abs(integral.joules - expected) <= integral.error_j
    assert integral.peak_w == pytest.approx(60.0 + 250.0, rel=1e-3)


def test_the_counter_not_supported_on_one_used_device_makes_both_power_samples(
    standin_nvml, monkeypatch, clock
):
    monkeypatch.setenv(NO_COUNTER_ENV, "1")
    source = NvmlSource(None, clock=clock, module=standin_nvml)
    assert source.info().method == POWER_SAMPLES
    assert [d["energy_counter"] for d in source.info().devices] == [False, False]


def test_no_pynvml_module_and_no_powercap_are_each_a_reason_never_a_zero(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    found = open_source(powercap_root=tmp_path / "absent")
    assert isinstance(found, Unavailable)
    assert [name for name, _ in found.tried] == ["nvml", "rapl"]
    assert "no pynvml module" in found.tried[0][1]
    assert "no powercap folder" in found.tried[1][1]
    energy = not_measured(found.tried).to_dict()
    assert energy["status"] == "not measured" and energy["source"] == "none"
    assert energy["reason"] == found.reason
    for figure in ("joules", "idle_w", "j_per_output_token", "output_tokens_per_j", "mean_w"):
        assert energy[figure] is None


def test_visible_devices_by_index_uuid_prefix_and_what_is_refused():
    uuids = ["GPU-aaaa-1", "GPU-bbbb-2", "GPU-aaab-3"]
    assert visible_entries(None) is None
    assert select_devices(None, uuids) == [0, 1, 2]
    assert select_devices(visible_entries("2, 0"), uuids) == [2, 0]
    assert select_devices(visible_entries("GPU-bbbb,GPU-aaab"), uuids) == [1, 2]
    refused = {
        "": "hides every GPU",
        "-1": "hides every GPU",
        "5": "matches no device",
        "GPU-aaa": "matches 2 devices",
        "MIG-1234": "MIG instance",
    }
    for value, words in refused.items():
        with pytest.raises(SourceUnavailable, match=words):
            select_devices(visible_entries(value), uuids)


def test_a_read_is_timed_by_nvmls_own_timestamp_of_the_value(standin_nvml, law, clock, monkeypatch):
    """The stand-in's clock runs 0.25 s ahead of the reader's: a read is timed by NVML's
    timestamp (the stand-in's instant, µs), so its joules are the law's between the two reads'
    stated times; NVML's clock further than MAX_STAMP_SKEW_S from this one, or no field-values
    call, and the reader's clock times it."""
    ahead = Clock(0.0)
    monkeypatch.setattr(standin_nvml, "clock", ahead)
    clock.now, ahead.now = law.origin_s + 500.0, law.origin_s + 500.25
    source = NvmlSource("1", clock=clock, module=standin_nvml)
    assert source.stamped and STAMPED_NOTE in source.info().notes
    first = source.read()
    clock.now, ahead.now = law.origin_s + 530.0, law.origin_s + 530.25
    second = source.read()
    assert (first.t_s, second.t_s) == (law.origin_s + 500.25, law.origin_s + 530.25)
    joules = sum(deltas(first, second, source.info().ranges_raw)) * 1e-3
    assert joules == pytest.approx(law.joules(1, first.t_s, second.t_s), rel=1e-6)
    ahead.now = clock.now + 2 * MAX_STAMP_SKEW_S
    skewed = NvmlSource("1", clock=clock, module=standin_nvml)
    assert not skewed.stamped and skewed.read().t_s == clock.now
    assert STAMPED_NOTE not in skewed.info().notes
    monkeypatch.delattr(standin_nvml, "nvmlDeviceGetFieldValues")
    ahead.now = clock.now
    assert not NvmlSource("1", clock=clock, module=standin_nvml).stamped


def test_a_counter_that_goes_down_leaves_the_sampler_no_total_and_no_error(
    standin_nvml, law, clock
):
    """A counter read lower than the last (a reset: a driver reload; here the stand-in's clock
    moved back) gives the sampler's running total (`energy_j`) no figure from there on, and the
    sample and the phase mark that read it go on. Before, the ValueError ended the sampler's
    thread, and from `set_phase` (the main thread) failed the cell."""
    source = NvmlSource(None, clock=clock, module=standin_nvml)
    sampler = MemorySampler(interval_s=0.01, energy=source)
    assert sampler.sample().energy_j == 0.0
    clock.sleep(2.0)
    assert sampler.sample().energy_j == pytest.approx(
        law.joules(0, clock.now - 2.0, clock.now) + law.joules(1, clock.now - 2.0, clock.now),
        rel=1e-6,
    )
    clock.now -= 1.0  # the counter goes down
    sampler.set_phase("bench")
    assert sampler.samples[-1].energy_j is None and sampler.phase == "bench"
    clock.sleep(5.0)  # past the last read again: the total is still not known
    assert sampler.sample().energy_j is None
