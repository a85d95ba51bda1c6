"""Speculative-decoding acceptance from counter deltas (or per-response timings)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .engines.base import SpecCounters
from .loadgen.records import OK, RequestRecord


def _delta(after: float | None, before: float | None) -> float | None:
    if after is None:
        return None
    return after - (before or 0.0)


def acceptance_from_counters(before: SpecCounters, after: SpecCounters) -> dict[str, Any] | None:
    """rate = accepted / draft tokens; mean length = 1 + accepted / drafts;
    per position i = accepted_at_i / drafts. None when the engine exposed no counters."""
    if after.accept_length is not None:  # engines that only report a running mean (SGLang)
        return {
            "acceptance_rate": None,
            "mean_acceptance_length": after.accept_length,
            "per_position": [],
            "source": "server_info",
            "drafts": None,
            "draft_tokens": None,
            "accepted_tokens": None,
        }
    drafts = _delta(after.drafts, before.drafts)
    draft_tokens = _delta(after.draft_tokens, before.draft_tokens)
    accepted = _delta(after.accepted_tokens, before.accepted_tokens)
    if drafts is None or draft_tokens is None or accepted is None:
        return None
    per_pos_before = before.accepted_per_pos or [0.0] * len(after.accepted_per_pos)
    per_position = [
        (a - b) / drafts if drafts else None
        for a, b in zip(after.accepted_per_pos, per_pos_before, strict=False)
    ]
    return {
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "per_position": per_position,
        "source": "metrics",
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
    }


def acceptance_from_timings(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """llama.cpp's per-response `timings.draft_n` / `draft_n_accepted`, summed over the run."""
    measured = [r for r in records if r.status == OK and not r.warmup and r.timings]
    draft = sum(r.timings.get("draft_n", 0) or 0 for r in measured)
    accepted = sum(r.timings.get("draft_n_accepted", 0) or 0 for r in measured)
    if not any("draft_n" in r.timings for r in measured):
        return None
    return {
        "acceptance_rate": accepted / draft if draft else None,
        "mean_acceptance_length": None,
        "per_position": [],
        "source": "timings",
        "drafts": None,
        "draft_tokens": draft,
        "accepted_tokens": accepted,
    }
