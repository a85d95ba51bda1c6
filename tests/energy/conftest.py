"""The stand-in NVML (tests/fixtures/energy/pynvml) on the path, its law, and a clock the test
moves: the reader's reads and the stand-in's counter are taken at the same instant."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tests.fixtures.energy.nvml_law import CONFIG_ENV, NO_COUNTER_ENV, Law

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "energy"
ORIGIN_S = 1_750_000_000.0


class Clock:
    """Epoch seconds that move only when the test says."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock(ORIGIN_S + 100.0)


@pytest.fixture
def law(monkeypatch) -> Law:
    base = Law.from_env()
    chosen = Law(ORIGIN_S, base.devices)
    monkeypatch.setenv(CONFIG_ENV, chosen.to_env())
    monkeypatch.delenv(NO_COUNTER_ENV, raising=False)
    return chosen


@pytest.fixture
def standin_nvml(monkeypatch, law, clock):
    """The stand-in `pynvml`, first on sys.path, reading `clock`."""
    monkeypatch.syspath_prepend(str(FIXTURE))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    module = importlib.import_module("pynvml")
    assert Path(module.__file__).parent.parent == FIXTURE
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.setattr(module, "clock", clock)
    return module
