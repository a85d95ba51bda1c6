"""A cell's energy as one typed record, and its metrics.json shape (`energy`).

A measured record holds the source and method, the devices or domains read, the window the
joules cover and the idle window (epoch seconds, so a reading can be audited against the
counter), gross joules, idle watts and joules above idle, mean and peak power, the tokens and
the per-token figures, the counter's resolution, the cross-check of the counter against the
power samples, the steady state's figures with their interval, (for RAPL) the client's share of
the CPU time, and whether other work disturbed the bench (it draws power too). One that could
not be read says `not measured`, every figure null (never 0), with the reason: which sources
were tried and why each failed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..vocabulary import ENERGY_MEASURED as MEASURED
from ..vocabulary import ENERGY_NOT_MEASURED as NOT_MEASURED
from .interval import SliceInterval
from .samples import CrossCheck
from .source import NONE, RAPL
from .windows import Window


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


@dataclass(frozen=True)
class Steady:
    """The steady state: its window, joules (with their stated error), tokens and interval."""

    window: Window
    joules: float
    error_j: float | None
    output_tokens: float
    prompt_tokens: float
    interval: SliceInterval | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.window.to_dict(),
            "joules": self.joules,
            "error_j": self.error_j,
            "mean_w": _ratio(self.joules, self.window.duration_s),
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "j_per_output_token": _ratio(self.joules, self.output_tokens),
            "output_tokens_per_j": _ratio(self.output_tokens, self.joules),
            "j_per_token": _ratio(self.joules, self.output_tokens + self.prompt_tokens),
            "interval": self.interval.to_dict() if self.interval else None,
        }


@dataclass(frozen=True)
class EnergyRecord:
    """See the module's docstring; docs/metrics.md says how each field is read."""

    status: str
    source: str
    method: str | None = None
    devices: tuple[dict[str, Any], ...] = ()
    scope: str = ""
    window: Window | None = None
    idle_window: Window | None = None
    joules: float | None = None
    error_j: float | None = None
    idle_w: float | None = None
    peak_w: float | None = None
    output_tokens: float | None = None
    prompt_tokens: float | None = None
    resolution_j: float | None = None
    valid: bool | None = None
    cross_check: CrossCheck | None = None
    steady: Steady | None = None
    steady_reason: str = ""
    client_cpu_share_pct: float | None = None
    disturbed: bool | None = None
    notes: tuple[str, ...] = ()
    reason: str = ""
    tried: tuple[tuple[str, str], ...] = ()

    @property
    def duration_s(self) -> float | None:
        return None if self.window is None else self.window.duration_s

    @property
    def joules_above_idle(self) -> float | None:
        if self.joules is None or self.idle_w is None or self.duration_s is None:
            return None
        return self.joules - self.idle_w * self.duration_s

    @property
    def tokens(self) -> float | None:
        if self.output_tokens is None or self.prompt_tokens is None:
            return None
        return self.output_tokens + self.prompt_tokens

    def to_dict(self) -> dict[str, Any]:
        """metrics.json's `energy`."""
        return {
            "status": self.status,
            "source": self.source,
            "method": self.method,
            "devices": [dict(d) for d in self.devices],
            "scope": self.scope or None,
            "window": self.window.to_dict() if self.window else None,
            "idle_window": self.idle_window.to_dict() if self.idle_window else None,
            "joules": self.joules,
            "error_j": self.error_j,
            "resolution_j": self.resolution_j,
            "idle_w": self.idle_w,
            "joules_above_idle": self.joules_above_idle,
            "mean_w": _ratio(self.joules, self.duration_s),
            "peak_w": self.peak_w,
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "j_per_output_token": _ratio(self.joules, self.output_tokens),
            "output_tokens_per_j": _ratio(self.output_tokens, self.joules),
            "j_per_token": _ratio(self.joules, self.tokens),
            "tokens_per_j": _ratio(self.tokens, self.joules),
            "j_above_idle_per_output_token": _ratio(self.joules_above_idle, self.output_tokens),
            "valid": self.valid,
            "cross_check": self.cross_check.to_dict() if self.cross_check else None,
            "steady": self.steady.to_dict() if self.steady else None,
            "steady_reason": self.steady_reason or None,
            "client_cpu_share_pct": self.client_cpu_share_pct,
            "disturbed": self.disturbed,
            "notes": list(self.notes),
            "reason": self.reason or None,
            "tried": [{"source": s, "reason": r} for s, r in self.tried],
        }


DISTURBED_NOTE = (
    "other work on the machine during the bench (the cell's interference flag) drew power too: "
    "these joules are not the server's alone"
)


def with_disturbed(record: EnergyRecord, disturbed: bool | None) -> EnergyRecord:
    """A measured record marked as the cell's measurement is (process/machine_use's one
    definition of disturbed, handed in by the cell): a disturbed one says why it overstates."""
    if record.status != MEASURED:
        return record
    notes = (*record.notes, DISTURBED_NOTE) if disturbed else record.notes
    return replace(record, disturbed=disturbed, notes=notes)


def not_measured(tried: tuple[tuple[str, str], ...], reason: str = "") -> EnergyRecord:
    """No source could be read: the reason names each source tried and why it failed."""
    text = reason or "; ".join(f"{source}: {why}" for source, why in tried) or "no source tried"
    return EnergyRecord(status=NOT_MEASURED, source=NONE, reason=text, tried=tried)


def client_cpu_share_pct(client_cpu_s: float | None, busy_cpu_s: float | None) -> float | None:
    """The load client's share, in %, of the CPU time the machine was busy over the window
    (process/machine_use.py's client tree CPU and /proc/stat busy time): how much of a package
    counter's work was the client's rather than the server's."""
    if client_cpu_s is None or not busy_cpu_s or busy_cpu_s <= 0:
        return None
    return 100.0 * min(client_cpu_s, busy_cpu_s) / busy_cpu_s


def with_client_share(
    record: EnergyRecord, client_cpu_s: float | None, busy_cpu_s: float | None
) -> EnergyRecord:
    """A RAPL record with the client's CPU share set; any other record as it is (a GPU's board
    energy holds none of the client's work)."""
    if record.source != RAPL:
        return record
    return replace(record, client_cpu_share_pct=client_cpu_share_pct(client_cpu_s, busy_cpu_s))
