"""A cell's energy as every table, the card and the run's last lines read it: metrics.json's
`energy` (energy/record.py) as the figures shown, the words of what it covers, and why it was
not measured. A cell's repeats are folded here too (their per-token figures averaged, as the
rates are: outputs/repeats.py). Stdlib only: the end-of-run table reads it while the
Snakefile's handlers run."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ...vocabulary import ENERGY_MEASURED, ENERGY_NOT_MEASURED, ENERGY_NVML, ENERGY_RAPL, Status

BOARD_SCOPE = "board energy: a lower bound on the machine's"
PACKAGE_SCOPE = "package counter: the whole socket, the client included"
# The per-token figures a cell's repeats average (the rest of `energy` is the first repeat's).
PER_TOKEN = (
    "j_per_output_token",
    "output_tokens_per_j",
    "j_per_token",
    "tokens_per_j",
    "j_above_idle_per_output_token",
)
# summary.csv's energy columns, after every earlier column (never reordered).
ENERGY_COLUMNS = [
    "energy_status",  # measured | not measured (empty: a result from before energy was read)
    "energy_source",  # nvml | rapl | none
    "j_per_output_token",  # gross joules over the bench window ÷ its output tokens
    "output_tokens_per_j",
    "j_per_token",  # per prompt + output token
    "j_above_idle_per_output_token",
    "idle_w",
    "energy_note",  # not measured: why; measured: what the joules cover
]


def scope_words(energy: Mapping[str, Any]) -> str:
    """What a measured figure covers, in the tables' words: a GPU's board energy is a lower
    bound on the machine's; a package counter holds the whole socket, the client's share too."""
    if energy.get("source") == ENERGY_NVML:
        return BOARD_SCOPE
    if energy.get("source") == ENERGY_RAPL:
        share = energy.get("client_cpu_share_pct")
        return PACKAGE_SCOPE + ("" if share is None else f": its CPU share {share:.0f} %")
    return ""


def devices_text(energy: Mapping[str, Any]) -> str:
    """`GPU 0 (Stand-in H200)`, `package-0, dram-0`: the devices or domains read."""
    shown = []
    for device in energy.get("devices") or ():
        if "index" in device:
            name = f" ({device['name']})" if device.get("name") else ""
            shown.append(f"GPU {device['index']}{name}")
        else:
            shown.append(str(device.get("name") or device.get("zone")))
    return ", ".join(shown)


def measured(metrics: Mapping[str, Any]) -> bool:
    """A done cell whose `energy` was read."""
    energy = metrics.get("energy") or {}
    return metrics.get("status") == Status.DONE and energy.get("status") == ENERGY_MEASURED


def not_measured_reason(metrics: Mapping[str, Any]) -> str | None:
    """Why a done cell's energy was not read (None: it was, the cell did not finish, or its
    metrics.json is from before energy was read)."""
    energy = metrics.get("energy")
    if metrics.get("status") != Status.DONE or not isinstance(energy, Mapping):
        return None
    if energy.get("status") != ENERGY_NOT_MEASURED:
        return None
    return str(energy.get("reason") or "no reason recorded")


def energy_note(metrics: Mapping[str, Any]) -> str:
    """`not measured: <reason>`; a measured one's scope, and why to read it with care (other
    work drew power too, a figure not valid)."""
    reason = not_measured_reason(metrics)
    if reason is not None:
        return f"{ENERGY_NOT_MEASURED}: {reason}"
    if not measured(metrics):
        return ""
    energy = metrics["energy"]
    parts = [scope_words(energy)]
    if energy.get("disturbed"):
        parts.append("disturbed: other work on the machine drew power too")
    if energy.get("valid") is False:
        parts.append("not valid: " + "; ".join(energy.get("notes") or ["see the card"]))
    return "; ".join(p for p in parts if p)


def energy_columns(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's ENERGY_COLUMNS from its metrics.json (figures only where it was measured)."""
    energy = metrics.get("energy") if isinstance(metrics.get("energy"), Mapping) else {}
    done = metrics.get("status") == Status.DONE
    row: dict[str, Any] = {
        "energy_status": energy.get("status") if done else None,
        "energy_source": energy.get("source") if done else None,
        "energy_note": energy_note(metrics),
    }
    for key in ENERGY_COLUMNS[2:-1]:
        row[key] = energy.get(key) if measured(metrics) else None
    return row


def shared_reasons(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """The not-measured reasons of the rows (ENERGY_COLUMNS' `energy_note`), each with the cells
    it holds for, in first-seen order: one entry when every such cell says the same."""
    found: dict[str, list[str]] = {}
    for row in rows:
        if row.get("energy_status") == ENERGY_NOT_MEASURED:
            found.setdefault(str(row.get("energy_note")), []).append(str(row.get("cell")))
    return list(found.items())


def not_measured_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """`energy: not measured: <reason>`, once where every cell that ran says the same (and no
    cell was measured: `on this machine`), else once per reason with the cells it holds for."""
    reasons = shared_reasons(rows)
    if not reasons:
        return []
    some_measured = any(row.get("energy_status") == ENERGY_MEASURED for row in rows)
    if len(reasons) == 1 and not some_measured:
        note = reasons[0][0].removeprefix(f"{ENERGY_NOT_MEASURED}: ")
        return [f"energy: {ENERGY_NOT_MEASURED} on this machine: {note}"]
    return [f"energy of {', '.join(cells)}: {note}" for note, cells in reasons]


def repeat_energy_figures(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    """One repeat's J per output token (gross, and above idle), where it was measured: what
    the interval across a cell's repeats is taken over (outputs/repeats.py)."""
    energy = metrics.get("energy") or {}
    read = energy.get("status") == ENERGY_MEASURED
    return {key: energy.get(key) if read else None for key in PER_TOKEN[:1] + PER_TOKEN[-1:]}


def _mean(values: Sequence[Any]) -> float | None:
    data = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.fmean(data) if data else None


def combined_energy(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """A cell's repeats' `energy` as one (the finished repeats, in repeat order): the first
    measured one's, its per-token figures the mean over the measured repeats (`repeats` says
    how many); the first's as it is where none was measured."""
    found = [m.get("energy") for m in runs if isinstance(m.get("energy"), Mapping)]
    if not found:
        return None
    read = [e for e in found if e.get("status") == ENERGY_MEASURED]
    if not read:
        return dict(found[0])
    out = dict(read[0])
    for key in PER_TOKEN:
        out[key] = _mean([e.get(key) for e in read])
    out["repeats"] = len(read)
    return out
