"""A cell's whole energy record against the stand-in NVML's law (standin): the joules, idle
watts and J per token equal the closed form over the window the record reports; the
steady state's within its stated error; the record's metrics.json shape."""

from __future__ import annotations

import pytest

from tests.energy.test_windows import request
from tests.fixtures.energy.nvml_law import NO_COUNTER_ENV
from workflow_scripts.energy.figures import Readings, cell_energy
from workflow_scripts.energy.meter import idle_baseline
from workflow_scripts.energy.nvml import NvmlSource
from workflow_scripts.energy.record import (
    EnergyRecord,
    client_cpu_share_pct,
    not_measured,
    with_client_share,
)
from workflow_scripts.energy.source import RAPL

pytestmark = pytest.mark.standin

INTERVAL_S = 0.5
KEYS = {
    "status", "source", "method", "devices", "scope", "window", "idle_window", "joules",
    "error_j", "resolution_j", "idle_w", "joules_above_idle", "mean_w", "peak_w",
    "output_tokens", "prompt_tokens", "j_per_output_token", "output_tokens_per_j",
    "j_per_token", "tokens_per_j", "j_above_idle_per_output_token", "valid", "cross_check",
    "steady", "steady_reason", "client_cpu_share_pct", "disturbed", "notes", "reason", "tried",
}  # fmt: skip


def closed_loop(scale: float = 10.0):
    """Two slots, five requests of 40 tokens (as test_windows' closed loop, 10 times longer):
    all slots busy from 0 s, the first drained at 70 s, the last ended at 90 s."""
    spans = [(0.0, 3.0), (0.0, 4.0), (3.0, 6.0), (4.0, 7.0), (6.0, 9.0)]
    return [request(i, a * scale, b * scale, tokens=40) for i, (a, b) in enumerate(spans)]


def gather(source: NvmlSource, clock, load_origin: float) -> Readings:
    """The sampler's series every 0.5 s around the bench, and the reads at its edges."""
    power, energy = [], []
    for k in range(241):
        clock.now = load_origin - 10.0 + INTERVAL_S * k
        power.append((clock.now, source.power_w()))
        if (joules := source.energy_j()) is not None:  # the sampler keeps only what it read
            energy.append((clock.now, joules))
    clock.now = load_origin - 0.5
    start = source.read()
    clock.now = load_origin + 91.0
    end = source.read()
    return Readings(start, end, tuple(power), tuple(energy), INTERVAL_S)


def test_a_counter_cells_figures_equal_the_closed_form(standin_nvml, law, clock):
    source = NvmlSource("1", clock=clock, module=standin_nvml)
    clock.now = law.origin_s + 100.0
    idle = idle_baseline(source, seconds=60.0, sleep=clock.sleep, clock=clock)
    load_origin = law.origin_s + 200.0
    records = closed_loop()
    record = cell_energy(
        source.info(), gather(source, clock, load_origin), idle, records, load_origin, slots=2
    )
    energy = record.to_dict()
    assert set(energy) == KEYS
    a, b = load_origin - 0.5, load_origin + 91.0
    joules = law.joules(1, a, b)
    idle_w = law.joules(1, law.origin_s + 100.0, law.origin_s + 160.0) / 60.0
    assert energy["window"] == {"start_s": a, "end_s": b, "duration_s": 91.5}
    assert energy["idle_window"]["start_s"] == law.origin_s + 100.0
    assert energy["joules"] == pytest.approx(joules, rel=1e-6)
    assert energy["idle_w"] == pytest.approx(idle_w, rel=1e-6)
    # a difference of two figures of four reads of a mJ counter: within their resolution
    assert energy["joules_above_idle"] == pytest.approx(joules - idle_w * 91.5, abs=0.01)
    assert energy["mean_w"] == pytest.approx(joules / 91.5, rel=1e-6)
    assert (energy["output_tokens"], energy["prompt_tokens"]) == (200, 50)
    assert energy["j_per_output_token"] == pytest.approx(joules / 200, rel=1e-6)
    assert energy["output_tokens_per_j"] == pytest.approx(200 / joules, rel=1e-6)
    assert energy["j_per_token"] == pytest.approx(joules / 250, rel=1e-6)
    assert energy["resolution_j"] == 1e-3 and energy["valid"] is True
    assert energy["peak_w"] == pytest.approx(310.0, rel=1e-3)  # idle 60 + 250 at a crest
    check = energy["cross_check"]
    assert check["counter_j"] == energy["joules"]
    assert abs(check["difference_pct"]) < 0.1 and check["within_error"]
    steady = energy["steady"]
    assert steady["window"]["start_s"] == load_origin
    assert steady["window"]["end_s"] == load_origin + 70.0
    exact = law.joules(1, load_origin, load_origin + 70.0)
    assert abs(steady["joules"] - exact) <= steady["error_j"]
    interval = steady["interval"]
    assert interval["slices"] == 20 and interval["slice_s"] == pytest.approx(3.5)
    assert interval["lo"] <= steady["j_per_output_token"] <= interval["hi"]


def test_a_power_samples_cell_integrates_over_the_bench_window(
    standin_nvml, law, clock, monkeypatch
):
    monkeypatch.setenv(NO_COUNTER_ENV, "1")
    source = NvmlSource("1", clock=clock, module=standin_nvml)
    load_origin = law.origin_s + 200.0
    readings = gather(source, clock, load_origin)
    assert (readings.start, readings.end) == (None, None)
    record = cell_energy(source.info(), readings, None, closed_loop(), load_origin, slots=2)
    energy = record.to_dict()
    assert energy["method"] == "power samples"
    assert energy["window"] == {
        "start_s": load_origin,
        "end_s": load_origin + 90.0,
        "duration_s": 90.0,
    }
    exact = law.joules(1, load_origin, load_origin + 90.0)
    assert abs(energy["joules"] - exact) <= energy["error_j"]
    assert energy["resolution_j"] is None and energy["cross_check"] is None
    assert energy["idle_w"] is None and energy["joules_above_idle"] is None
    assert energy["steady"]["interval"]["slices"] == 20


def test_not_measured_is_null_figures_and_the_reason():
    record = not_measured((("nvml", "no pynvml module"), ("rapl", "no powercap folder")))
    energy = record.to_dict()
    assert set(energy) == KEYS
    assert energy["reason"] == "nvml: no pynvml module; rapl: no powercap folder"
    assert energy["tried"][1] == {"source": "rapl", "reason": "no powercap folder"}
    numbers = [k for k, v in energy.items() if isinstance(v, int | float) and v is not True]
    assert numbers == []  # never 0: null


def test_the_clients_cpu_share_goes_on_a_package_counter_only():
    assert client_cpu_share_pct(3.0, 12.0) == 25.0
    assert client_cpu_share_pct(3.0, 0.0) is None and client_cpu_share_pct(None, 5.0) is None
    rapl = EnergyRecord(status="measured", source=RAPL)
    assert with_client_share(rapl, 1.0, 4.0).client_cpu_share_pct == 25.0
    gpu = EnergyRecord(status="measured", source="nvml")
    assert with_client_share(gpu, 1.0, 4.0).client_cpu_share_pct is None
