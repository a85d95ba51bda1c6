"""The drafter's energy change per output token against its base's, with its 95 % interval, its
test's p-value and a verdict: `saves`, `costs more`, `no detectable difference`, or `not
measured` (either cell's energy was not read: the note says why). spec_gain, spec_gain_sweep
and the drafter at the latency goal all take it from here; a sweep series' points are one
family (ENERGY_KEYS: Holm's step-down, verdicts/families.judge_series, as the speed gain's).

The verdict reads the gross J per output token (all the joules the devices drew over the bench
window ÷ its output tokens): it is the counter's own figure, nothing subtracted that was read at
another time (the idle draw is read before the server starts, so "above idle" also holds the
loaded server's own static draw and any drift since), and it is what the machine pays per token
while it serves: the idle watts are drawn while the tokens are made, and a drafter that makes
them faster spreads them over more tokens, a real saving. The change in J above idle per output
token is given beside it, without a verdict: what the drafter's own work costs, the idle draw
left out (more arithmetic per token shows there first).

The interval:
- both cells repeated ≥ 3 times: the repeats' t-interval (changes.repeat_changes), which holds
  the variance from one server start to the next;
- else each cell's steady-state interval (energy/interval.py: its time slices resampled) read as
  the relative error of its J per output token, se = ln(hi / lo) ÷ (2 z), z the normal's 97.5 %
  quantile: the change's log ratio ± z √(se_base² + se_drafter²), and its two-sided p-value from
  the same normal, so the verdict (the interval's side of 0) and the test agree. Without a
  steady-state interval on either side there is no interval and no verdict (the source says
  why).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ...verdicts.families import VerdictKeys
from ...vocabulary import ENERGY_MEASURED, ENERGY_NOT_MEASURED, Status
from ..changes import NO_DIFFERENCE, repeat_changes
from ..stats import MIN_REPEATS, Z975

SAVES, COSTS_MORE = "saves", "costs more"
FIGURE = "j_per_output_token"
ENERGY_KEYS = VerdictKeys(
    "energy_p_value", "energy_verdict", "energy_p_adjusted", "energy_verdict_unadjusted",
    "energy_family", (SAVES, COSTS_MORE), NO_DIFFERENCE,
)  # fmt: skip
ENERGY_CHANGE_COLUMNS = [
    "base_j_per_output_token",
    "drafter_j_per_output_token",
    "energy_change_pct",  # gross J per output token, drafter against base
    "energy_change_lo_pct",
    "energy_change_hi_pct",
    "energy_verdict",  # saves | costs more | no detectable difference | not measured
    "energy_above_idle_change_pct",  # J above idle per output token: the drafter's own work
    "energy_interval_source",
    "energy_p_value",
    "energy_p_adjusted",  # Holm's over the series' points (ENERGY_KEYS)
    "energy_verdict_unadjusted",
    "energy_family",
    "energy_note",  # not measured: why
]


@dataclass(frozen=True)
class EnergyChange:
    """Drafter against base: each one's gross J per output token, the change in % with its
    interval, verdict and p-value, the change above idle, what the interval rests on, and why
    there is no verdict where there is none."""

    base_j: float | None = None
    drafter_j: float | None = None
    change_pct: float | None = None
    lo_pct: float | None = None
    hi_pct: float | None = None
    verdict: str | None = None
    p_value: float | None = None
    above_idle_change_pct: float | None = None
    source: str = ""
    note: str = ""

    def columns(self) -> dict[str, Any]:
        return {
            "base_j_per_output_token": self.base_j,
            "drafter_j_per_output_token": self.drafter_j,
            "energy_change_pct": self.change_pct,
            "energy_change_lo_pct": self.lo_pct,
            "energy_change_hi_pct": self.hi_pct,
            "energy_verdict": self.verdict,
            "energy_above_idle_change_pct": self.above_idle_change_pct,
            "energy_interval_source": self.source or None,
            "energy_p_value": self.p_value,
            "energy_note": self.note or None,
        }


def verdict_of(lo_pct: float | None, hi_pct: float | None) -> str | None:
    """`costs more` / `saves` when the whole interval lies on one side of 0."""
    if lo_pct is None or hi_pct is None:
        return None
    if lo_pct > 0:
        return COSTS_MORE
    if hi_pct < 0:
        return SAVES
    return NO_DIFFERENCE


def unmeasured(metrics: Mapping[str, Any]) -> str | None:
    """Why a done cell has no energy figure to compare (None: it has one)."""
    energy = metrics.get("energy")
    if not isinstance(energy, Mapping):
        return "not recorded (a result from before energy was read)"
    if energy.get("status") != ENERGY_MEASURED:
        return str(energy.get("reason") or ENERGY_NOT_MEASURED)
    if not energy.get(FIGURE):
        return "no output token in its window"
    return None


def _pct(new: float | None, base: float | None) -> float | None:
    return None if new is None or base is None or base <= 0 else 100.0 * (new / base - 1)


def relative_error(energy: Mapping[str, Any]) -> tuple[float, int] | str:
    """A cell's J per output token's relative standard error from its steady-state interval,
    and the slices it rests on; or why there is none."""
    steady = energy.get("steady") or {}
    interval = steady.get("interval") or {}
    lo, hi = interval.get("lo"), interval.get("hi")
    if lo is None or hi is None or lo <= 0:
        return interval.get("reason") or energy.get("steady_reason") or "no steady-state interval"
    return math.log(hi / lo) / (2 * Z975), int(interval.get("slices") or 0)


def slices_change(base: Mapping[str, Any], drafter: Mapping[str, Any]) -> EnergyChange:
    """The change's interval and p-value from both cells' steady-state intervals."""
    b, d = base[FIGURE], drafter[FIGURE]
    errors = {"base": relative_error(base), "drafter": relative_error(drafter)}
    missing = [f"{side}: {why}" for side, why in errors.items() if isinstance(why, str)]
    if missing:
        return EnergyChange(b, d, _pct(d, b), source="no interval: " + "; ".join(missing))
    (se_b, n_b), (se_d, n_d) = errors["base"], errors["drafter"]
    se, center = math.hypot(se_b, se_d), math.log(d / b)
    lo, hi = (100.0 * (math.exp(center + sign * Z975 * se) - 1) for sign in (-1, 1))
    p = math.erfc(abs(center) / se / math.sqrt(2)) if se > 0 else float(center == 0)
    source = f"steady-state time slices, {n_b} + {n_d}"
    return EnergyChange(b, d, _pct(d, b), lo, hi, verdict_of(lo, hi), p, source=source)


def _repeat_values(metrics: Mapping[str, Any]) -> list[float | None] | None:
    repeats = metrics.get("repeats") or {}
    if repeats.get("done", 0) < MIN_REPEATS:
        return None
    values = [f.get(FIGURE) for f in repeats.get("figures", ())]
    return values if sum(v is not None for v in values) >= MIN_REPEATS else None


def energy_change(base: Mapping[str, Any] | None, drafter: Mapping[str, Any]) -> EnergyChange:
    """The drafter's energy change against its base (metrics records: repeats folded in);
    nothing where either did not finish (the pair's flags say so)."""
    if base is None or not base.get("status") == drafter.get("status") == Status.DONE:
        return EnergyChange()
    why = {name: unmeasured(m) for name, m in (("base cell", base), ("drafter cell", drafter))}
    if any(why.values()):
        note = "; ".join(f"{name}: {reason}" for name, reason in why.items() if reason)
        return EnergyChange(verdict=ENERGY_NOT_MEASURED, note=note)
    b, d = base["energy"], drafter["energy"]
    above = _pct(d.get("j_above_idle_per_output_token"), b.get("j_above_idle_per_output_token"))
    values = _repeat_values(base), _repeat_values(drafter)
    if values[0] is not None and values[1] is not None:
        found = repeat_changes(values[0], values[1], FIGURE)
        runs = f"repeats, {base['repeats']['done']} + {drafter['repeats']['done']} runs"
        return EnergyChange(
            b[FIGURE], d[FIGURE], found.change_pct, found.lo_pct, found.hi_pct,
            verdict_of(found.lo_pct, found.hi_pct), found.p_value, above, runs,
        )  # fmt: skip
    return replace(slices_change(b, d), above_idle_change_pct=above)
