"""The RAPL reader against a stand-in powercap tree (tests/fixtures/energy/powercap.py;
standin): a folder laid out as /sys/class/powercap, its counters advanced at known rates by a
process the test starts, package 0's wrapping around mid-window."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.energy import powercap
from workflow_scripts.energy import rapl
from workflow_scripts.energy.counters import counter_delta, deltas, wrap_time_s
from workflow_scripts.energy.meter import Unavailable, open_source
from workflow_scripts.energy.rapl import RaplSource
from workflow_scripts.energy.source import COUNTER, RAPL, SourceUnavailable

pytestmark = pytest.mark.standin

ADVANCE = Path(powercap.__file__)
TICK_S = 0.01


def advance(root: Path, ticks: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ADVANCE), str(root), str(ticks), str(TICK_S)])


def expected_uj(ticks: int) -> list[int]:
    steps = {z.zone: z.step_uj(TICK_S) for z in powercap.ZONES}
    return [ticks * steps[zone] for zone in powercap.COUNTED]


def test_package_and_dram_joules_are_exact_across_a_wrap(tmp_path):
    root = powercap.make_tree(tmp_path / "powercap")
    source = RaplSource(root)
    info = source.info()
    assert (info.source, info.method, info.unit_j) == (RAPL, COUNTER, 1e-6)
    assert [d["zone"] for d in info.devices] == list(powercap.COUNTED)
    assert [d["kind"] for d in info.devices] == ["package", "dram", "package", "dram"]
    assert "whole socket" in info.scope
    start = source.read()
    assert advance(root, 10).wait(timeout=60) == 0
    end = source.read()
    assert end.raw[0] < start.raw[0]  # package 0 wrapped inside the window
    assert list(deltas(start, end, info.ranges_raw)) == expected_uj(10)
    joules = sum(deltas(start, end, info.ranges_raw)) * info.unit_j
    assert joules == pytest.approx(sum(expected_uj(10)) * 1e-6, rel=1e-12)


def test_the_sampled_counter_keeps_every_wrap_while_the_counters_move(tmp_path):
    """Read while the process advances them (as the sampler does): the joules since the first
    read equal the ticks' sum exactly once the process is done."""
    root = powercap.make_tree(tmp_path / "powercap")
    source = RaplSource(root)
    assert source.energy_j() == 0.0
    proc = advance(root, 30)
    while proc.poll() is None:
        source.energy_j()
        time.sleep(TICK_S / 3)
    assert proc.returncode == 0
    assert source.energy_j() == pytest.approx(sum(expected_uj(30)) * 1e-6, rel=1e-12)


def test_the_root_comes_from_its_variable(tmp_path, monkeypatch):
    root = powercap.make_tree(tmp_path / "elsewhere")
    monkeypatch.setenv(rapl.ROOT_ENV, str(root))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    found = open_source()
    assert isinstance(found, RaplSource) and found.root == root
    assert open_source(order=("rapl",), powercap_root=tmp_path / "none").tried[0][0] == "rapl"


def test_unreadable_counters_are_reasons(tmp_path, monkeypatch):
    """Tests run as root, whom mode 000 does not stop: a directory in place of `energy_uj`
    stands for a file that cannot be read, and a stand-in `read_text` that raises
    PermissionError for a non-root user's "permission denied"."""
    root = powercap.make_tree(tmp_path / "dir")
    energy = root / "intel-rapl:1" / "energy_uj"
    energy.unlink()
    energy.mkdir()
    with pytest.raises(SourceUnavailable, match="energy_uj unreadable: IsADirectoryError"):
        RaplSource(root)

    root = powercap.make_tree(tmp_path / "denied")
    real = rapl.read_text

    def denied(path: Path) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(rapl, "read_text", denied)
    found = open_source(order=("rapl",), powercap_root=root)
    assert isinstance(found, Unavailable)
    assert found.reason.startswith("rapl: permission denied on ")
    assert "energy_uj (readable by root only)" in found.reason


def test_a_tree_without_package_zones_is_a_reason(tmp_path):
    only = [z for z in powercap.ZONES if z.name in ("core", "psys")]
    root = powercap.make_tree(tmp_path / "p", tuple(only))
    with pytest.raises(SourceUnavailable, match="no RAPL package zone"):
        RaplSource(root)


def test_counter_deltas_undo_one_wrap_and_refuse_a_reset():
    assert counter_delta(100, 250, 1000) == 150
    assert counter_delta(900, 50, 1000) == 150
    with pytest.raises(ValueError, match="no range"):
        counter_delta(900, 50, None)
    assert wrap_time_s(262_143.0, 65.0) == pytest.approx(4032.97, abs=0.01)
    assert wrap_time_s(262_143.0, 0.0) is None
