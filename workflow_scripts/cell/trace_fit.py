"""A replayed trace's prompts fitted to their `input_length` in the engine's own tokens, once the
server is up and before the context guard counts them.

`input_length` is taken as every token the server sees for the request, its chat template and
BOS included (what the adapter's `count_prompt_tokens` counts, and what a trace's engine
logged). The text keeps the layout loadgen/trace_text.py gave it, with only where each span ends
moved, by whole words:

- each distinct Mooncake block is fitted once, to MOONCAKE_BLOCK_TOKENS counted ALONE: its
  count as a prompt of its own less the empty prompt's (the template and BOS). That count
  depends on the block's text only, so one text serves every request that names the block and
  shared blocks stay byte-identical (the increase when appended would depend on what precedes
  the block in each request, and could give one block two texts);
- a request's last part (a head of its last block, or a fresh span) is its own, so it is
  fitted on the count of the request's WHOLE text, which takes up what the blocks' joins added.

What remains is at most about one word's tokens (text is cut between words), or more where the
blocks before the last part already pass `input_length`. An engine whose adapter cannot count
keeps the characters-per-token estimate, and says so.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from ..engines.base import EngineAdapter
from ..loadgen.prompts import Dataset, Prompt
from ..loadgen.trace_text import TraceLayout, TraceSpan
from ..loadgen.traces import MOONCAKE_BLOCK_TOKENS
from ..vocabulary import Cell
from .context_guard import COUNT_WORKERS

ENGINE = "engine tokenizer"
ESTIMATE = "estimate"


class ServerAddress(Protocol):
    """Where a plan's server answers (engines.command.ServerCommand, shared.AttachedCommand)."""

    @property
    def base_url(self) -> str: ...


class TracePlan(Protocol):
    """What the fit reads of a plan the load runs on (a frozen dataclass: run.LaunchPlan,
    shared.AttachedPlan): its cell, its prompts and its server."""

    @property
    def cell(self) -> Cell: ...
    @property
    def dataset(self) -> Dataset: ...
    @property
    def command(self) -> ServerAddress: ...


Plan = TypeVar("Plan", bound=TracePlan)


def fit_words(
    count_of: Callable[[int], int], target: int, guess: int, most: int
) -> tuple[int, int]:
    """The word count n in [0, `most`] whose `count_of(n)` (tokens, not decreasing in n) is
    nearest `target` (a tie: the smaller n), and that count. Starts at `guess`, steps towards
    the target by as many words as tokens are missing (doubling the step until the target lies
    between two counts), then bisects: a few calls for a guess near the answer."""
    seen: dict[int, int] = {}

    def at(n: int) -> int:
        if n not in seen:
            seen[n] = count_of(n)
        return seen[n]

    n = min(max(guess, 0), most)
    step = max(1, abs(target - at(n)))  # in words: about a token a word, then doubled or halved
    lo: int | None = None
    hi: int | None = None
    if at(n) <= target:
        lo = n
        while hi is None and lo < most:
            probe = min(most, lo + step)
            if at(probe) <= target:
                lo, step = probe, step * 2
            else:
                hi = probe
    else:
        hi = n
        while lo is None and hi > 0:
            probe = max(0, hi - step)
            if at(probe) <= target:
                lo = probe
            else:
                hi, step = probe, step * 2
    if lo is None:  # even no word passes the target
        return 0, at(0)
    if hi is None:  # every word the span may take stays below it
        return lo, at(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if at(mid) <= target:
            lo = mid
        else:
            hi = mid
    return (lo, at(lo)) if target - at(lo) <= at(hi) - target else (hi, at(hi))


@dataclasses.dataclass(frozen=True)
class FitResult:
    """The prompts as sent, each distinct block's fitted text, and what metrics.json records
    of the fit (`trace_fit`)."""

    prompts: list[Prompt]
    facts: dict[str, Any]
    blocks: dict[int, str] = dataclasses.field(default_factory=dict)


def _head_room(layout: TraceLayout, span: TraceSpan, blocks: dict[int, int]) -> int:
    """Most words a last part may take: its block's fitted words (a head of it), or, fresh,
    the content's."""
    if span.block is not None and span.block in blocks:
        return blocks[span.block]
    return len(layout.content)


def fit_trace(prompts: Sequence[Prompt], count: Callable[[str], int]) -> FitResult:
    """Every trace prompt fitted with `count` (text -> the server's tokens for it as a prompt);
    the others as they were. Calls run COUNT_WORKERS at a time, one fit per block, then one
    per request."""
    layouts = {p.index: p.trace for p in prompts if p.trace is not None}
    if not layouts:
        return FitResult(list(prompts), {})
    empty = count("")
    block_spans = {
        s.block: s for lay in layouts.values() for s in lay.spans[:-1] if s.block is not None
    }
    some = next(iter(layouts.values()))  # every layout indexes the same content

    def fit_block(span: TraceSpan) -> int:
        words, _ = fit_words(
            lambda n: count(some.text(span, n)) - empty if n else 0,
            MOONCAKE_BLOCK_TOKENS,
            span.words,
            len(some.content),
        )
        return words

    with ThreadPoolExecutor(COUNT_WORKERS) as pool:
        fitted = dict(zip(block_spans, pool.map(fit_block, block_spans.values()), strict=True))

        def fit_request(layout: TraceLayout) -> tuple[str, int]:
            *whole, last = layout.spans
            joined = "".join(layout.text(s, fitted.get(s.block, s.words)) for s in whole)

            def text(n: int) -> str:
                return (joined + layout.text(last, n)).rstrip()

            room = _head_room(layout, last, fitted)
            words, tokens = fit_words(
                lambda n: count(text(n)), layout.input_length, min(last.words, room), room
            )
            if not whole and words == 0:  # a length below the template's: a word, not nothing
                words, tokens = 1, count(text(1))
            return text(words), tokens

        done = dict(zip(layouts, pool.map(fit_request, layouts.values()), strict=True))
    out = [dataclasses.replace(p, text=done[p.index][0]) if p.index in done else p for p in prompts]
    errors = [abs(done[i][1] - lay.input_length) for i, lay in layouts.items()]
    facts = {
        "method": ENGINE,
        "abs_error_tokens": {"p50": statistics.median(errors), "max": max(errors)},
        "blocks": len(fitted),
    }
    texts = {b: some.text(span, fitted[b]) for b, span in block_spans.items()}
    return FitResult(out, facts, texts)


def fit_note(facts: dict[str, Any]) -> str:
    """What the dataset note adds of the fit."""
    if facts["method"] == ESTIMATE:
        return f"; prompt lengths NOT fitted in the engine's tokens ({facts['reason']})"
    err = facts["abs_error_tokens"]
    return (
        f"; prompts fitted to input_length (template included) with the engine's tokenizer: "
        f"|error| p50 {err['p50']:g}, max {err['max']} tokens"
    )


def fit_dataset(
    dataset: Dataset, adapter: EngineAdapter, base_url: str, endpoint: str
) -> tuple[Dataset, dict[str, Any]]:
    """The dataset with its trace prompts fitted by the server at `base_url` (its note saying
    how close they came), and metrics.json's facts of it (`trace_fit`, `dataset_note`); a
    dataset without a trace comes back as it is, with no facts. An adapter that cannot count
    keeps the estimate and says so."""
    if not any(p.trace is not None for p in dataset.prompts):
        return dataset, {}
    try:
        result = fit_trace(
            dataset.prompts, lambda text: adapter.count_prompt_tokens(base_url, text, endpoint)
        )
        facts = result.facts
    except NotImplementedError as exc:
        result = FitResult(list(dataset.prompts), {})
        facts = {"method": ESTIMATE, "abs_error_tokens": None, "reason": str(exc)}
    note = dataset.note + fit_note(facts)
    fitted = dataclasses.replace(dataset, prompts=result.prompts, note=note)
    return fitted, {"trace_fit": facts, "dataset_note": note}


def fit_trace_plan(plan: Plan, adapter: EngineAdapter) -> tuple[Plan, dict[str, Any]]:
    """The plan with its dataset fitted by its server, and metrics.json's facts of the fit (the
    plan as it was, and none, when its dataset holds no trace)."""
    dataset, facts = fit_dataset(
        plan.dataset, adapter, plan.command.base_url, plan.cell.workload_spec.endpoint
    )
    return (dataclasses.replace(plan, dataset=dataset) if facts else plan), facts
