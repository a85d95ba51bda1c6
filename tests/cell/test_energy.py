"""A cell's energy as its run reads it (cell/energy.py): the GPUs its server sees, the record
when no source opens or a read fails, the disturbed mark; and a whole cell run reading RAPL
against a stand-in powercap tree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.fixtures.energy import powercap
from tests.fixtures.sweeps.law import SERVER, Law
from tests.support.engines import left_behind
from tests.support.pipeline import tiny_config, tiny_workload
from workflow_scripts.cell import run as cell_run
from workflow_scripts.cell.attempts import BenchWindow
from workflow_scripts.cell.energy import (
    Meter,
    attached_meter,
    docker_visible_devices,
    energy_record,
    open_meter,
    server_visible_devices,
)
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.energy import rapl
from workflow_scripts.energy.counters import CounterRead
from workflow_scripts.energy.meter import IdleBaseline
from workflow_scripts.energy.record import DISTURBED_NOTE
from workflow_scripts.energy.source import COUNTER, RAPL, SourceInfo
from workflow_scripts.energy.windows import Window
from workflow_scripts.loadgen.client import LoadResult
from workflow_scripts.loadgen.records import OK, RequestRecord
from workflow_scripts.process.memory import MemorySampler

TICK_S = 0.01


def test_the_gpus_a_server_sees_come_from_its_docker_flag_or_its_environment(monkeypatch):
    assert docker_visible_devices("all") is None
    assert docker_visible_devices('"device=0,2"') == "0,2"
    assert docker_visible_devices("device=GPU-ab12") == "GPU-ab12"
    assert docker_visible_devices("2") == "0,1"
    assert docker_visible_devices("") == ""  # none: NVML then says it hides every GPU
    docker = {"launch": "docker", "docker": {"gpus": "device=1"}}
    assert server_visible_devices(docker, {"CUDA_VISIBLE_DEVICES": "3"}) == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")  # what a Slurm job is given
    native = {"launch": "native"}
    assert server_visible_devices(native, {}) == "5"
    assert server_visible_devices(native, {"CUDA_VISIBLE_DEVICES": "0"}) == "0"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert server_visible_devices(native, {}) is None


def test_no_source_is_a_reason_and_a_point_takes_its_series_idle_draw(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    sampler = MemorySampler(interval_s=0.1)
    load = LoadResult([], False, 0, 0.0, 1.0)
    none = energy_record(open_meter("none", None), sampler, load, 1, None, {})
    assert (none["status"], none["reason"]) == ("not measured", "none: energy.source is none: "
                                                "no counter is read")  # fmt: skip
    nvml = energy_record(open_meter("nvml", "0"), sampler, load, 1, None, {})
    assert nvml["tried"][0]["source"] == "nvml" and "no pynvml module" in nvml["reason"]
    monkeypatch.setenv(rapl.ROOT_ENV, str(tmp_path / "absent"))
    cpu = energy_record(open_meter("rapl", None), sampler, load, 1, None, {})
    assert cpu["reason"].startswith("rapl: no powercap folder")
    assert all(cpu[k] is None for k in ("joules", "idle_w", "j_per_output_token"))
    broken = SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1)
    broken.nvmlDeviceGetHandleByIndex = lambda i: i
    broken.nvmlDeviceGetUUID = lambda h: "GPU-1"
    broken.nvmlDeviceGetName = lambda h: 1 / 0  # past NVML's start: not a SourceUnavailable
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    lost = energy_record(open_meter("nvml", None), sampler, load, 1, None, {})
    assert lost["reason"] == "nvml: ZeroDivisionError: division by zero"
    idle = IdleBaseline(Window(10.0, 13.0), 80.0, 240.0, COUNTER)
    point = attached_meter("nvml", {"visible_devices": "1", "idle": idle.to_dict()})
    assert point.idle == idle and point.visible_devices == "1" and point.source is None


class Counter:
    """A source of one counter that rises 2 J a second from 0 at t = 0 (1 mJ units)."""

    def info(self) -> SourceInfo:
        return SourceInfo(RAPL, COUNTER, ({"zone": "intel-rapl:0"},), 1e-3, (None,), "socket")

    def read(self) -> CounterRead:
        raise OSError("the device went away")

    def power_w(self) -> None:
        return None

    def energy_j(self) -> None:
        return None


def test_a_read_that_fails_or_goes_down_is_the_reason_and_a_disturbed_bench_is_marked():
    meter = Meter(Counter())
    meter.read_edge("end")
    sampler = MemorySampler(interval_s=0.1)
    load = LoadResult([], False, 0, 0.0, 1.0)
    failed = energy_record(meter, sampler, load, 1, None, {})
    assert failed["status"] == "not measured"
    assert failed["reason"] == "rapl: the counter could not be read at the bench's end: " + (
        "the device went away"
    )
    meter.clear()
    meter.reads = {"start": CounterRead(100.0, (9_000,)), "end": CounterRead(110.0, (20,))}
    reset = energy_record(meter, sampler, load, 1, None, {})  # a driver reload: no range
    assert reset["reason"].startswith("rapl: no figure from the reads: the counter went down")
    meter.reads = {"start": CounterRead(100.0, (0,)), "end": CounterRead(110.0, (20_000,))}
    meter.idle = IdleBaseline(Window(90.0, 95.0), 1.0, 5.0, COUNTER)
    record = RequestRecord(0, 0, OK, sent_s=1.0, ttft_s=1.0, e2e_s=5.0, completion_tokens=40)
    record.prompt_tokens, record.chunk_times_s = 10, [1.0 + i * 0.1 for i in range(40)]
    load = LoadResult([record], False, 0, 0.0, 1.0, 0.0, 100.0)
    flagged = {"flagged": True}
    energy = energy_record(meter, sampler, load, 1, flagged, {})
    assert (energy["joules"], energy["joules_above_idle"], energy["output_tokens"]) == (20, 10, 40)
    assert energy["disturbed"] is True and DISTURBED_NOTE in energy["notes"]
    calm = energy_record(meter, sampler, load, 1, {"flagged": False}, {})
    assert calm["disturbed"] is False and DISTURBED_NOTE not in calm["notes"]


def advance(root: Path, ticks: int) -> subprocess.Popen:
    script = Path(powercap.__file__)
    return subprocess.Popen([sys.executable, str(script), str(root), str(ticks), str(TICK_S)])


@pytest.mark.standin
def test_a_cpu_cells_rapl_package_and_dram_joules_are_exact_across_a_wrap(tmp_path, monkeypatch):
    """run_cell on the law stand-in server (a native llamacpp engine that nothing says uses a
    GPU: `auto` reads RAPL) with LLMBENCH_POWERCAP_ROOT at a stand-in powercap tree
    (tests/fixtures/energy/powercap.py: no machine here has a readable one). A process of this
    test advances its counters 12 ticks while the bench runs (started right after the bench's
    first read, waited for before its last), package 0 wrapping on the fourth: the record's
    joules are exactly the ticks' sum over the package and dram zones, the idle draw (the tree
    still) 0 W, and the client's CPU share beside the package counter."""
    root = powercap.make_tree(tmp_path / "powercap")
    monkeypatch.setenv(rapl.ROOT_ENV, str(root))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    ticks, running = 12, []
    start, end = BenchWindow.measure_start, BenchWindow.measure_end

    def started(window: BenchWindow) -> None:
        start(window)
        running.append(advance(root, ticks))

    def ended(window: BenchWindow) -> None:
        assert running[-1].wait(timeout=60) == 0
        end(window)

    monkeypatch.setattr(BenchWindow, "measure_start", started)
    monkeypatch.setattr(BenchWindow, "measure_end", ended)
    workload = tiny_workload(dataset={"kind": "random", "input_len": 8}, num_prompts=4,
                             max_tokens=6, warmup_requests=0)  # fmt: skip
    config = tiny_config([{"model": "smollm2-135m", "engine": "law", "workload": "tiny"}],
                         workloads={"tiny": workload})  # fmt: skip
    config["engines"] = {"law": Law(step_ms=5, step_per_stream_ms=1).engine()}
    (cell,) = build_cells(validate_config(config))
    assert cell.run.energy_source == "rapl"
    weights = tmp_path / "m.gguf"
    weights.write_bytes(b"GGUF")
    out = tmp_path / "cell"
    result = cell_run.run_cell(cell_run.CellInputs(cell, out, {}, {"primary": str(weights)}))
    assert result["status"] == "done", result.get("reason")
    assert left_behind(str(SERVER)) == []
    energy = json.loads((out / "metrics.json").read_text())["energy"]
    assert (energy["status"], energy["source"], energy["method"]) == ("measured", "rapl", COUNTER)
    assert [d["zone"] for d in energy["devices"]] == list(powercap.COUNTED)
    steps = {z.zone: z.step_uj(TICK_S) for z in powercap.ZONES}
    exact_uj = ticks * sum(steps[zone] for zone in powercap.COUNTED)
    assert energy["joules"] == pytest.approx(exact_uj * 1e-6, rel=1e-12)
    assert energy["idle_w"] == 0.0 and energy["joules_above_idle"] == energy["joules"]
    assert energy["output_tokens"] == result["completion_tokens"] == 4 * 6
    assert 0.0 <= energy["client_cpu_share_pct"] <= 100.0
    assert "whole socket" in energy["scope"]
    assert energy["disturbed"] == result["interference"]["flagged"]
