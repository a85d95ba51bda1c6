"""metrics.json `energy` objects made by hand, through the record's own type (energy/record.py:
`EnergyRecord.to_dict()`), so a table test reads exactly the shape a cell writes: a measured one
with the figures a test chooses (its steady state's interval set so that its relative standard
error is known: lo, hi = j · exp(∓ z · se)), and a not-measured one with its reason."""

from __future__ import annotations

import math
from typing import Any

from workflow_scripts.energy import nvml, rapl
from workflow_scripts.energy.interval import SliceInterval
from workflow_scripts.energy.record import EnergyRecord, Steady, not_measured
from workflow_scripts.energy.source import COUNTER
from workflow_scripts.energy.windows import Window
from workflow_scripts.outputs.stats import Z975
from workflow_scripts.vocabulary import ENERGY_MEASURED, ENERGY_NVML, ENERGY_RAPL

START_S = 1_750_000_000.0
NO_POWERCAP = "no powercap folder (/sys/class/powercap): no RAPL here (a VM?)"
NO_PYNVML = "no pynvml module (install nvidia-ml-py)"


def measured_energy(
    j_per_output_token: float,
    output_tokens: int = 1000,
    window_s: float = 10.0,
    se: float | None = 0.02,
    above_idle: float | None = None,
    source: str = ENERGY_NVML,
    client_share_pct: float | None = None,
    disturbed: bool = False,
) -> dict[str, Any]:
    """A measured record: `output_tokens` over `window_s` s at `j_per_output_token` gross, its
    J above idle per token `above_idle` (None: half the gross; the idle draw set to match over
    the window), a steady state of the same J per token whose interval has relative standard error
    `se` (None: no interval, too few slices)."""
    joules = j_per_output_token * output_tokens
    above_idle = j_per_output_token / 2 if above_idle is None else above_idle
    idle_w = (joules - above_idle * output_tokens) / window_s
    window = Window(START_S, START_S + window_s)
    interval = (
        SliceInterval(None, None, 3, 0.5, 0, reason="3 slice(s) of the steady state: fewer than 5")
        if se is None
        else SliceInterval(
            j_per_output_token * math.exp(-Z975 * se),
            j_per_output_token * math.exp(Z975 * se),
            20,
            window_s / 20,
            2000,
        )
    )
    steady = Steady(window, joules, 0.01, output_tokens, 2 * output_tokens, interval)
    gpu = source == ENERGY_NVML
    record = EnergyRecord(
        status=ENERGY_MEASURED,
        source=source,
        method=COUNTER,
        devices=(
            {"index": 0, "uuid": "GPU-0", "name": "H200", "energy_counter": True}
            if gpu
            else {"zone": "intel-rapl:0", "name": "package-0", "kind": "package", "package": 0},
        ),
        scope=nvml.SCOPE if gpu else rapl.SCOPE,
        window=window,
        idle_window=Window(START_S - 5.0, START_S - 2.0),
        joules=joules,
        error_j=0.001,
        idle_w=idle_w,
        peak_w=1.5 * joules / window_s,
        output_tokens=output_tokens,
        prompt_tokens=2 * output_tokens,
        resolution_j=0.001 if gpu else 1e-6,
        valid=True,
        steady=steady,
        client_cpu_share_pct=client_share_pct if source == ENERGY_RAPL else None,
    )
    out = record.to_dict()
    out["disturbed"] = disturbed
    return out


def unmeasured_energy(*tried: tuple[str, str]) -> dict[str, Any]:
    """A not-measured record: each source tried and why it could not be read."""
    return not_measured(tried or ((ENERGY_RAPL, NO_POWERCAP),)).to_dict()
