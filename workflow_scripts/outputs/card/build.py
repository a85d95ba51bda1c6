"""One card from a cell and its metrics.json: the sections in order, the notes, the status line."""

from __future__ import annotations

from collections.abc import Sequence

from ...loadgen.request_table import RequestTable
from ...process.memory import understates_note
from ...text import first_line
from ...vocabulary import Cell, CellMetrics, Status
from ..compact import NOT_RUN, peak_mem_gib
from ..energy.card import energy_section
from ..fidelity.card import CHANGED_NOTE, CardFidelity, fidelity_section
from ..search.cells import slo_section, tail_note
from .configuration import configuration_section, tags
from .measured import (
    by_turn_section,
    checks_section,
    intervals_section,
    measured_section,
    spec_section,
)
from .model import Card, Section
from .provenance import commands_section, provenance_section


def notes(cell: Cell, metrics: CellMetrics) -> list[str]:
    out = []
    status = metrics.get("status")
    if status != Status.DONE and metrics.get("reason"):
        out.append(f"{status}: {metrics['reason'].strip()}")
    reference = cell.reference
    if reference:
        extra = {k: v for k, v in reference.items() if k != "note"}
        out.append(
            "Published reference figures (not measured here): "
            + ", ".join(f"{k} = {v}" for k, v in extra.items())
            + (f". {reference['note']}" if reference.get("note") else "")
        )
    if metrics.get("synthetic"):
        out.append("Synthetic weights: throughput is real, the generated text is noise.")
    if metrics.get("errors_by_reason"):
        reasons = ", ".join(f"{k}: {v}" for k, v in metrics["errors_by_reason"].items())
        out.append(f"Errors by reason: {reasons}.")
    if metrics.get("hit_time_cap"):
        out.append("The run hit its time cap: requests in flight after the grace were cancelled.")
    if (metrics.get("conversations") or {}).get("stops"):
        out.append(stops_note(metrics["conversations"]))
    mem = metrics.get("mem") or {}
    if mem.get("baseline_quiet") is False:
        out.append("The memory baseline was noisy before launch; memory deltas are less certain.")
    if understates_note(mem, peak_mem_gib(mem)):
        out.append(
            "Peak memory understates what the server holds (its row says why): read the "
            "server's memory from its anonymous and file-backed rows."
        )
    guard = metrics.get("context_guard") or {}
    if guard.get("skipped"):
        out.append(
            f"{len(guard['skipped'])} of {guard.get('checked')} prompts were skipped before the "
            f"load: prompt + max_tokens {guard.get('max_tokens')} does not fit the per-slot "
            f"context of {guard.get('per_slot_context')} tokens (context_guard "
            f"'{guard.get('policy')}')."
        )
    if metrics.get("dataset_note"):
        out.append(f"Dataset: {metrics['dataset_note']}.")
    for key in ("context_note", "notes"):
        value = metrics.get(key)
        if isinstance(value, str) and value:
            out.append(value)
        elif isinstance(value, list):
            out.extend(str(v) for v in value)
    return out


STOPS_SHOWN = 10  # a card names this many stopped conversations, then counts the rest


def stops_note(conversations: dict) -> str:
    """Where the conversations that did not complete ended and why (metrics.json
    `conversations.stops`): a failed turn's error, or the time cap."""
    stops = conversations["stops"]
    where = "; ".join(
        f"session {s['session']} (prompt {s['prompt_index']}) at turn {s['turn']}: {s['reason']}"
        for s in stops[:STOPS_SHOWN]
    )
    more = f"; and {len(stops) - STOPS_SHOWN} more" if len(stops) > STOPS_SHOWN else ""
    return (
        f"Conversations not completed: {conversations['stopped_by_failure']} of "
        f"{conversations['planned']} stopped at a failed turn (their later turns not sent), "
        f"{conversations['cut_by_time_cap']} cut by the time cap. Where each started one ended: "
        f"{where}{more}."
    )


def status_line(metrics: CellMetrics) -> str:
    status = metrics.get("status") or NOT_RUN
    reason = first_line(metrics.get("reason"), 300)
    return f"{status}: {reason}" if reason and status != Status.DONE else status


def build_card(
    cell: Cell,
    metrics: CellMetrics,
    plots: Sequence[tuple[str, str]] = (),
    results_dir: str = "results",
    requests: RequestTable | None = None,
    fidelity: CardFidelity | None = None,
) -> Card:
    """`cell` is the config's cell, `metrics` its metrics.json; `plots` are (caption, path
    relative to the card); `requests` (its requests' table) add intervals; `fidelity` its
    outputs against the cell it is compared with."""
    sections = [configuration_section(cell, metrics), measured_section(metrics, cell.reference)]
    if cell.has_drafter:
        sections.append(spec_section(metrics, cell.reference))
    if (turns := by_turn_section(metrics)) is not None:
        sections.append(turns)
    if (goal := slo_section(metrics)) is not None:
        sections.append(goal)
    if (energy := energy_section(metrics)) is not None:
        sections.append(energy)
    if requests is not None and requests.rows and metrics.get("status") == Status.DONE:
        sections.append(intervals_section(requests))
    if fidelity is not None:
        sections.append(fidelity_section(fidelity))
    if metrics.get("client") or metrics.get("interference"):
        sections.append(checks_section(metrics))
    if plots:
        sections.append(Section("Plots", images=list(plots)))
    sections.append(commands_section(cell, metrics, results_dir))
    sections.append(provenance_section(cell, metrics))
    found = [*notes(cell, metrics), *filter(None, [tail_note(metrics)])]
    if fidelity is not None and fidelity.outputs_changed and cell.has_drafter:
        found.append(CHANGED_NOTE)
    sections.append(Section("Notes", paragraphs=found or ["—"], bullets=True))
    return Card(cell.id, status_line(metrics), sections, tags(cell, metrics))
