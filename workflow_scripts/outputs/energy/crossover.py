"""Where along the load a drafter stops saving energy: spec_crossover's energy columns, from one
series' spec_gain_sweep rows in load order (each point's energy verdict is its series' family's:
change.ENERGY_KEYS), and a sentence that holds it against where the drafter stops being
faster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..changes import FASTER, NO_DIFFERENCE, SLOWER
from .change import COSTS_MORE, SAVES

ENERGY_CROSSOVER_COLUMNS = [
    "last_saves_energy",
    "first_not_saving_energy",
    "energy_summary",
    "first_not_saving_energy_verdict",  # costs more | no detectable difference
    *[
        f"{name}_change{end}_pct"
        for name in ("last_saves_energy", "first_not_saving_energy")
        for end in ("", "_lo", "_hi")
    ],
]
JUDGED = (SAVES, COSTS_MORE, NO_DIFFERENCE)


def _joined(labels: Sequence[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def energy_words(rows: Sequence[Mapping[str, Any]]) -> str:
    """The series' energy verdicts in load order, in plain words; '' where no point's energy
    was measured (spec_gain_sweep's rows say `not measured` and why: nothing to place)."""
    judged = [r for r in rows if r.get("energy_verdict") in JUDGED]
    if not judged:
        read = any(r.get("energy_change_pct") is not None for r in rows)
        return "no energy verdict at any point" if read else ""
    saves = [r["point"] for r in judged if r["energy_verdict"] == SAVES]
    others = [r["point"] for r in judged if r["energy_verdict"] != SAVES]
    if not others:
        text = "saves energy at every point"
    elif not saves:
        text = "never saves energy"
    else:
        flags = [r["energy_verdict"] == SAVES for r in judged]
        if flags == sorted(flags, reverse=True):
            text = f"saves energy up to {saves[-1]}, not from {others[0]}"
        else:
            text = (
                f"saves energy at {_joined(saves)}, not at {_joined(others)}: no single crossover"
            )
    missing = [r["point"] for r in rows if r.get("energy_verdict") not in JUDGED]
    return text + (f"; no energy verdict at {_joined(missing)}" if missing else "")


def _first_not(
    rows: Sequence[Mapping[str, Any]], key: str, yes: str, judged: tuple[str, ...]
) -> tuple[Mapping[str, Any] | None, bool]:
    """The first judged row whose `key` is not `yes`, and whether any row was judged."""
    found = [r for r in rows if r.get(key) in judged]
    return next((r for r in found if r[key] != yes), None), bool(found)


def time_relation(rows: Sequence[Mapping[str, Any]], axis: str) -> str:
    """Where the drafter stops saving energy against where it stops being faster."""
    energy, judged = _first_not(rows, "energy_verdict", SAVES, JUDGED)
    time, timed = _first_not(rows, "verdict", FASTER, (FASTER, SLOWER, NO_DIFFERENCE))
    if not judged or not timed:
        return ""
    if energy is None and time is None:
        return ", as it is faster at every point"
    if energy is None:
        return f", though it stops being faster from {time['point']}"
    if time is None:
        return ", while it is faster at every point"
    if energy[axis] == time[axis]:
        return ", where it stops being faster too"
    side = "before" if energy[axis] < time[axis] else "after"
    return f", {side} it stops being faster ({time['point']})"


def energy_crossover(rows: Sequence[Mapping[str, Any]], axis: str) -> dict[str, Any]:
    """One series' energy crossover from its spec_gain_sweep rows (in load order): the last
    point it saves energy at and the first it does not (points without a verdict skipped),
    with the change and interval each rests on, and the sentence."""
    judged = [r for r in rows if r.get("energy_verdict") in JUDGED]
    saving = [r for r in judged if r["energy_verdict"] == SAVES]
    last = saving[-1] if saving else None
    first = next((r for r in judged if r["energy_verdict"] != SAVES), None)
    out: dict[str, Any] = {
        "last_saves_energy": last[axis] if last else None,
        "first_not_saving_energy": first[axis] if first else None,
        "energy_summary": energy_words(rows) + time_relation(rows, axis),
        "first_not_saving_energy_verdict": first["energy_verdict"] if first else None,
    }
    for name, row in (("last_saves_energy", last), ("first_not_saving_energy", first)):
        for end in ("", "_lo", "_hi"):
            out[f"{name}_change{end}_pct"] = row.get(f"energy_change{end}_pct") if row else None
    return out
