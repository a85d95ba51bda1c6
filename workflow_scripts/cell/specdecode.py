"""Speculative-decoding acceptance from counter deltas, per-response fields, or an engine's running
mean read at warmup end and bench end. Each result says where it came from (`source`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..engines.base import SpecCounters
from ..loadgen.records import INCOMPLETE, OK, RequestRecord
from ..vocabulary import Cell


def _delta(after: float | None, before: float | None) -> float | None:
    if after is None:
        return None
    return after - (before or 0.0)


def _measured(records: Sequence[RequestRecord], status: str | None = OK) -> list[RequestRecord]:
    return [r for r in records if not r.warmup and (status is None or r.status == status)]


def acceptance_from_counters(before: SpecCounters, after: SpecCounters) -> dict[str, Any] | None:
    """rate = accepted / draft tokens; mean length = 1 + accepted / drafts;
    per position i = accepted_at_i / drafts. None when the engine exposed no counters."""
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


def _decode_tokens(record: RequestRecord) -> int:
    """Tokens a request got from verify steps: all but the first, which prefill produced. A
    request cut off without `usage` counts its content chunks (a lower bound)."""
    tokens = record.completion_tokens
    if tokens is None:
        tokens = record.content_chunks
    return max(int(tokens) - 1, 0)


def acceptance_from_server_info(
    before: SpecCounters | None, after: SpecCounters, records: Sequence[RequestRecord]
) -> dict[str, Any] | None:
    """The measured run's mean acceptance length from two readings of a running mean over the
    server's life (SGLang `avg_spec_accept_length` = tokens emitted by verify steps / verify
    steps): m0 at warmup end, m1 at bench end. With E0 and E_bench the tokens verify steps
    emitted before and during the run (the client's own counts, first tokens excluded), there
    were E0/m0 verify steps before and (E0 + E_bench)/m1 in all, so the run's mean is
    E_bench / ((E0 + E_bench)/m1 - E0/m0)."""
    m1 = after.accept_length
    if m1 is None:
        return None
    result = {
        "acceptance_rate": None,
        "per_position": [],
        "source": "server_info",
        "drafts": None,
        "draft_tokens": None,
        "accepted_tokens": None,
        "server_accept_length_warmup_end": before.accept_length if before else None,
        "server_accept_length_bench_end": m1,
    }
    if before is None:
        return {
            **result,
            "mean_acceptance_length": m1,
            "window": "server lifetime, warmup included (not read at warmup end)",
        }
    m0 = before.accept_length
    e0 = sum(_decode_tokens(r) for r in records if r.warmup and r.status == OK)
    e_bench = sum(_decode_tokens(r) for r in _measured(records, status=None))
    if not m0 or not e0:  # no verify step before the run: the bench-end mean is the run's
        return {**result, "mean_acceptance_length": m1, "window": "measured run"}
    steps_bench = (e0 + e_bench) / m1 - e0 / m0
    if steps_bench <= 0 or not e_bench:
        return {
            **result,
            "mean_acceptance_length": m1,
            "window": "server lifetime, warmup included (the difference is not defined)",
        }
    return {
        **result,
        "mean_acceptance_length": e_bench / steps_bench,
        "window": "measured run: the running means at warmup end and bench end, differenced "
        "with the client's token counts as weights",
    }


def acceptance_from_request_fields(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """Per-response speculative fields (SGLang `sglext.spec_tokens_details`) summed over the
    completed measured requests: the same requests the throughput counts."""
    measured = [r for r in _measured(records) if r.spec_details]
    verify = sum(r.spec_details.get("spec_verify_ct") or 0 for r in measured)
    if not measured or not verify:
        return None
    correct = [r.spec_details.get("spec_num_correct_drafts") for r in measured]
    proposed = [r.spec_details.get("spec_num_proposed_drafts") for r in measured]
    if all(c is not None for c in correct):
        accepted = float(sum(correct))
        length = 1 + accepted / verify
    else:  # builds without draft counts: tokens per verify step, first tokens excluded
        accepted = None
        length = sum(_decode_tokens(r) for r in measured) / verify
    rate = None
    if accepted is not None and all(p is not None for p in proposed) and sum(proposed):
        rate = accepted / sum(proposed)
    return {
        "acceptance_rate": rate,
        "mean_acceptance_length": length,
        "per_position": [],
        "source": "request_fields",
        "drafts": verify,
        "draft_tokens": float(sum(proposed)) if rate is not None else None,
        "accepted_tokens": accepted,
    }


def acceptance_from_timings(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """llama.cpp's per-response `timings.draft_n` / `draft_n_accepted`, summed over the completed
    measured requests."""
    measured = [r for r in _measured(records) if r.timings]
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


def cap_note(spec: dict[str, Any], records: Sequence[RequestRecord]) -> str | None:
    """When the time cap cancelled requests, server-side figures stop matching the completed
    requests the throughput counts: say so, with the completed-only rate when there is one."""
    cancelled = len(_measured(records, status=INCOMPLETE))
    if not cancelled or spec.get("source") not in ("metrics", "server_info"):
        return None
    text = (
        f"{cancelled} requests were cancelled at the time cap. These acceptance figures are the "
        "server's own counts, which are not limited to the completed requests the throughput "
        "counts: a cancelled request's drafts are in them in part or not at all (llama.cpp adds "
        "a request's drafts when its slot is released, vLLM and SGLang at every step)."
    )
    if spec.get("timings_acceptance_rate") is not None:
        text += (
            " Over the completed requests alone (per-response timings) the acceptance rate is "
            f"{spec['timings_acceptance_rate']:.3f}."
        )
    return text


def spec_result(cell: Cell, counters: dict, records: list) -> dict[str, Any] | None:
    """Acceptance from the best source the engine gave: per-response speculative fields (over
    the completed requests), counter deltas, a running mean read at warmup end and bench end,
    or per-response timings. `source` says which; `cap_note` flags figures that the time cap
    put out of step with the completed requests."""
    if cell.drafter_spec is None:
        return None
    before, after = counters.get("before"), counters.get("after")
    spec = acceptance_from_request_fields(records)
    if spec is None and after:
        spec = acceptance_from_counters(before or SpecCounters(), after)
        spec = spec or acceptance_from_server_info(before, after, records)
    spec = spec or acceptance_from_timings(records)
    if spec is None:
        return {
            "acceptance_rate": None,
            "mean_acceptance_length": None,
            "per_position": [],
            "source": None,
            "note": "the engine exposed no acceptance figures",
        }
    per_position = list(spec.get("per_position") or [])
    while per_position and not per_position[-1]:
        per_position.pop()  # the engine sizes the list to its largest possible draft
    spec["per_position"] = per_position
    cross = acceptance_from_timings(records)
    if cross and spec["source"] != "timings":
        spec["timings_acceptance_rate"] = cross["acceptance_rate"]
    note = cap_note(spec, records)
    if note:
        spec["cap_note"] = note
    return spec
