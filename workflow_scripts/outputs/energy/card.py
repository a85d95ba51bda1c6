"""A cell card's "Energy" section: what its tokens cost in energy, the windows the joules cover
(epoch seconds, so a reading can be audited against the counter), what the figure covers (a
GPU's board energy, a lower bound; a package counter's whole socket, the client's CPU share
beside it), the steady state's interval and the counter's cross-check; or `not measured` with
the reason and each source tried."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...vocabulary import ENERGY_NOT_MEASURED, Status
from .view import devices_text, measured, not_measured_reason, scope_words

if TYPE_CHECKING:
    from ..card.model import Section


def fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    from ..card.model import fmt as card_fmt  # the card package (its build) imports this module

    return card_fmt(value, unit, digits)


HEADER = ("Figure", "Measured", "How it was read")


def _window(window: Mapping[str, Any] | None) -> str:
    if not window:
        return "—"
    return f"{window['duration_s']:.3f} s (epoch {window['start_s']:.3f} → {window['end_s']:.3f})"


def _per_token(value: float | None, unit: str = "J") -> str:
    return "—" if value is None else f"{value:.4g} {unit}"


def steady_text(energy: Mapping[str, Any]) -> str:
    steady = energy.get("steady")
    if not steady:
        return energy.get("steady_reason") or "—"
    interval = steady.get("interval") or {}
    text = f"{_per_token(steady.get('j_per_output_token'))} per output token"
    if interval.get("lo") is not None:
        text += (
            f" [{interval['lo']:.4g}, {interval['hi']:.4g}] from {interval['slices']} slices of "
            f"{interval['slice_s']:.2f} s"
        )
    elif interval.get("reason"):
        text += f" (no interval: {interval['reason']})"
    return text + f", over {_window(steady.get('window'))}"


def cross_text(cross: Mapping[str, Any] | None) -> str:
    if not cross:
        return "—"
    within = "within" if cross.get("within_error") else "outside"
    return (
        f"power samples {fmt(cross.get('power_samples_j'), 'J')} against the counter's "
        f"{fmt(cross.get('counter_j'), 'J')}: {fmt(cross.get('difference_pct'), '%', 1)} "
        f"({within} the samples' stated error)"
    )


def energy_rows(energy: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The measured record's rows (metrics.json `energy`; docs/metrics.md says how each is read)."""
    joules = f"{fmt(energy.get('joules'), 'J', 3)} ± {fmt(energy.get('error_j'), 'J', 3)}"
    rows = [
        ("Source", f"{energy.get('source')}, {energy.get('method')}", devices_text(energy)),
        (
            "Bench window",
            _window(energy.get("window")),
            "the reads at the bench's edges (counter) or the bench itself (power samples)",
        ),
        (
            "Idle draw",
            f"{fmt(energy.get('idle_w'), 'W', 1)} over {_window(energy.get('idle_window'))}",
            "read across the memory baseline, before the server started",
        ),
        (
            "Joules",
            f"{joules} gross, {fmt(energy.get('joules_above_idle'), 'J', 3)} above idle",
            "above idle = gross − idle W × window",
        ),
        (
            "Power",
            f"mean {fmt(energy.get('mean_w'), 'W', 1)}, peak {fmt(energy.get('peak_w'), 'W', 1)}",
            "mean = joules ÷ window; peak: the highest power sample",
        ),
        (
            "Tokens in the window",
            f"{fmt(energy.get('output_tokens'), digits=0)} output, "
            f"{fmt(energy.get('prompt_tokens'), digits=0)} prompt",
            "the completed requests' tokens streamed inside it",
        ),
        (
            "J per output token",
            _per_token(energy.get("j_per_output_token")),
            "gross joules ÷ output tokens",
        ),
        (
            "Output tokens per J",
            _per_token(energy.get("output_tokens_per_j"), "tokens"),
            "its inverse",
        ),
        (
            "J per token (prompt + output)",
            _per_token(energy.get("j_per_token")),
            "gross joules ÷ prompt and output tokens",
        ),
        (
            "J above idle per output token",
            _per_token(energy.get("j_above_idle_per_output_token")),
            "the idle draw left out",
        ),
        (
            "Steady state",
            steady_text(energy),
            "every slot busy; interval: its time slices resampled",
        ),
        (
            "Cross-check",
            cross_text(energy.get("cross_check")),
            "the counter against the power samples' integral",
        ),
    ]
    if energy.get("client_cpu_share_pct") is not None:
        rows.append(
            (
                "Client's CPU share",
                fmt(energy["client_cpu_share_pct"], "%", 1),
                "of the CPU time the machine was busy over the window",
            )
        )
    return rows


def energy_section(metrics: Mapping[str, Any]) -> Section | None:
    """The card's Energy section; None for a cell that did not finish or a metrics.json from
    before energy was read."""
    from ..card.model import Section  # the card package (its build) imports this module

    if metrics.get("status") != Status.DONE or not isinstance(metrics.get("energy"), Mapping):
        return None
    energy = metrics["energy"]
    reason = not_measured_reason(metrics)
    if reason is not None or not measured(metrics):
        tried = [(t["source"], t["reason"]) for t in energy.get("tried") or ()]
        return Section(
            "Energy",
            ("Source tried", "Why it could not be read"),
            tried,
            paragraphs=[f"{ENERGY_NOT_MEASURED.capitalize()}: {reason or 'no reason recorded'}."],
        )
    notes = [f"Covers: {energy.get('scope') or scope_words(energy)}."]
    notes += [str(note) for note in energy.get("notes") or ()]
    if energy.get("valid") is False:
        notes.append("Not valid: read the figures with care (the notes say why).")
    if energy.get("resolution_j") is not None:
        notes.append(f"The counter's resolution: {energy['resolution_j']:g} J.")
    return Section("Energy", HEADER, energy_rows(energy), paragraphs=notes)
