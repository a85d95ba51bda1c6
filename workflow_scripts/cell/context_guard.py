"""Per-slot context guard: llama.cpp splits `-c` across `--parallel` slots, so a long prompt can
be refused (HTTP 400) by a server whose total context looks ample (docs/config.md). Before the
load starts, count every prompt with the server's own tokenizer and chat template, and compare
prompt + `max_tokens` with what one slot holds. The config says what
follows (`context_guard`):

- `skip`: drop the prompts that cannot fit; their indices and counts go into metrics.json;
- `fail`: fail the cell before any load;
- `size`: before launch, count with a short-lived tokenizer-only server and size `-c` so the
  longest prompt fits every slot (capped at the model's training context; what still cannot fit
  is skipped and recorded).

Engines that give every sequence the whole context (vLLM, SGLang) report `per_slot_context:
null` and drop nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..engines.base import EngineAdapter
from ..engines.command import cell_server_command, cell_weights
from ..loadgen.prompts import Prompt
from ..process.serve import ServerLaunch
from ..redact import redact
from ..vocabulary import NO_DRAFTER, Cell

COUNT_WORKERS = 4


class ContextGuardError(RuntimeError):
    """The workload does not fit the server's per-slot context and the config says fail."""


@dataclass
class ContextGuardReport:
    policy: str
    per_slot_context: int | None
    max_tokens: int
    checked: int = 0
    longest_prompt_tokens: int | None = None
    skipped: list[dict[str, int]] = field(default_factory=list)  # {index, prompt_tokens}
    sizing: dict[str, Any] | None = None  # what `size` did before launch
    # conversations only: {index, turns, kept} for each one cut at its last turn that fits
    cut_conversations: list[dict[str, int]] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if self.cut_conversations is None:
            del out["cut_conversations"]  # a workload without conversations records as before
        return out

    def enforce(self) -> None:
        """Raise when the cell must not load: `fail` with any misfit (a conversation cut too),
        or nothing left to send."""
        if self.cut_conversations and self.policy == "fail":
            raise ContextGuardError(
                f"{len(self.cut_conversations)} conversations pass the per-slot context of "
                f"{self.per_slot_context} tokens with max_tokens {self.max_tokens} before their "
                "last turn; context_guard is 'fail'"
            )
        if not self.skipped:
            return
        first = ", ".join(f"#{s['index']} ({s['prompt_tokens']} tok)" for s in self.skipped[:5])
        summary = (
            f"{len(self.skipped)} of {self.checked} prompts do not fit the per-slot context of "
            f"{self.per_slot_context} tokens with max_tokens {self.max_tokens} "
            f"(longest prompt {self.longest_prompt_tokens} tokens; first: {first})"
        )
        if self.policy == "fail":
            raise ContextGuardError(f"{summary}; context_guard is 'fail'")
        if len(self.skipped) == self.checked:
            raise ContextGuardError(f"{summary}; no prompt is left to send")


def request_texts(prompt: Prompt) -> list[str]:
    """The text each request of a prompt sends: the prompt, or each conversation turn's
    messages' contents joined by blank lines. Counted as one user message, a turn's count
    leaves out the template's markers between its messages (a few tokens each)."""
    if prompt.conversation is None:
        return [prompt.text]
    turns = prompt.conversation.turn_messages()
    return ["\n\n".join(m["content"] for m in messages) for messages in turns]


def count_turns(
    adapter: EngineAdapter, base_url: str, prompts: list[Prompt], endpoint: str
) -> dict[int, list[int]]:
    """Prompt index -> tokens the server will see for each of its requests, counted by the
    server itself."""
    flat = [(p.index, text) for p in prompts for text in request_texts(p)]
    with ThreadPoolExecutor(COUNT_WORKERS) as pool:
        counts = pool.map(lambda f: adapter.count_prompt_tokens(base_url, f[1], endpoint), flat)
        out: dict[int, list[int]] = {p.index: [] for p in prompts}
        for (index, _), n in zip(flat, counts, strict=True):
            out[index].append(n)
        return out


def count_tokens(
    adapter: EngineAdapter, base_url: str, prompts: list[Prompt], endpoint: str
) -> dict[int, int]:
    """Prompt index -> tokens of its longest request (a conversation's: its last turn)."""
    return {i: max(n) for i, n in count_turns(adapter, base_url, prompts, endpoint).items()}


def fitting(prompt: Prompt, counts: list[int], room: int) -> Prompt | None:
    """The prompt as it fits `room` tokens: whole, a conversation cut at its last turn that
    fits, or None when even its first request does not."""
    turns = sum(1 for _ in itertools.takewhile(lambda n: n <= room, counts))
    if turns == len(counts):
        return prompt
    if turns == 0 or prompt.conversation is None:
        return None
    return dataclasses.replace(prompt, conversation=prompt.conversation.cut(turns))


def answer_room(prompt: Prompt, max_tokens: int) -> int:
    """The tokens a prompt's answer may take: its own `max_tokens` (a trace request's output
    length), else the load's."""
    return prompt.max_tokens or max_tokens


def guard_prompts(
    cell: Cell,
    adapter: EngineAdapter,
    base_url: str,
    prompts: list[Prompt],
    sizing: dict[str, Any] | None = None,
) -> tuple[list[Prompt], ContextGuardReport]:
    """The prompts to send and the report; call `report.enforce()` before loading."""
    workload = cell.workload_spec
    max_tokens = workload.max_tokens
    per_slot = None
    if adapter.splits_context:
        per_slot = adapter.served_per_slot_context(base_url) or adapter.per_slot_context(cell)
    report = ContextGuardReport(
        policy=cell.run.context_guard,
        per_slot_context=per_slot,
        max_tokens=max_tokens,
        sizing=sizing,
    )
    if per_slot is None:
        return list(prompts), report
    turns = count_turns(adapter, base_url, prompts, workload.endpoint)
    counts = {i: max(n) for i, n in turns.items()}
    report.checked = len(counts)
    report.longest_prompt_tokens = max(counts.values(), default=None)
    talks = any(p.conversation is not None for p in prompts)
    report.cut_conversations = [] if talks else None
    kept = []
    for prompt in prompts:
        fit = fitting(prompt, turns[prompt.index], per_slot - answer_room(prompt, max_tokens))
        if fit is None:
            first = turns[prompt.index][0]  # a conversation's first turn, the least it sends
            report.skipped.append({"index": prompt.index, "prompt_tokens": first})
            continue
        if fit is not prompt:
            cut = {"index": prompt.index, "turns": prompt.requests, "kept": fit.requests}
            report.cut_conversations.append(cut)
        kept.append(fit)
    if report.cut_conversations:  # said as the skipped ones are: the log and metrics.json
        print(
            f"context guard ({report.policy}): {len(report.cut_conversations)} of "
            f"{report.checked} conversations cut at their last turn that fits the "
            f"{per_slot}-token slot: {[c['index'] for c in report.cut_conversations][:20]}",
            file=sys.stderr,
        )
    if report.skipped:  # never silent: the cell log says it, metrics.json lists them
        print(
            f"context guard ({report.policy}): {len(report.skipped)} of {report.checked} prompts "
            f"need more than the {per_slot}-token slot: "
            f"{[s['index'] for s in report.skipped][:20]}",
            file=sys.stderr,
        )
    if report.policy == "fail":
        kept = list(prompts)  # nothing is dropped: enforce() fails the cell instead
    return kept, report


def with_settings(cell: Cell, overrides: dict[str, Any], drop_drafter: bool = False) -> Cell:
    """The cell with engine settings overridden (and, for a tokenizer-only server, no drafter)."""
    engine_spec = {
        **cell.engine_spec,
        "settings": {**cell.engine_spec["settings"], **overrides},
    }
    if not drop_drafter:
        return dataclasses.replace(cell, engine_spec=engine_spec)
    return dataclasses.replace(
        cell, engine_spec=engine_spec, drafter=NO_DRAFTER, drafter_spec=None, drafter_weights=None
    )


def size_before_launch(
    cell: Cell,
    adapter: EngineAdapter,
    engine_info: dict[str, Any],
    weights_manifest: dict[str, Any],
    prompts: list[Prompt],
    log_path: Path,
) -> tuple[Cell, dict[str, Any] | None]:
    """Count the prompts with a tokenizer-only server of the same engine and weights, then give
    every slot room for the longest prompt + its answer. Returns the sized cell and a record."""
    if not adapter.splits_context:
        return cell, None  # every sequence gets the whole context: nothing to size
    counting = with_settings(cell, adapter.tokenizer_only_settings(cell), drop_drafter=True)
    weights, _ = cell_weights(counting, weights_manifest, None)
    command_for = partial(cell_server_command, counting, adapter, engine_info, weights, None)
    with ServerLaunch.reserve(command_for, log_path, cell.run.host) as launch:
        launch.start()
        launch.wait_ready(adapter.health_path, cell.run.ready_timeout_s)
        counts = count_tokens(adapter, launch.base_url, prompts, cell.workload_spec.endpoint)
        trained = adapter.trained_context(launch.base_url)
    command = launch.command
    longest = max(counts.values(), default=0)
    answer = cell.workload_spec.max_tokens
    needed = max((counts[p.index] + answer_room(p, answer) for p in prompts), default=answer)
    per_slot = min(needed, trained) if trained else needed
    settings = adapter.sized_settings(cell, per_slot)
    record = {
        "longest_prompt_tokens": longest,
        "needed_per_slot_tokens": needed,
        "trained_context": trained,
        "configured_per_slot_context": adapter.per_slot_context(cell),
        "settings": settings,
        "command": redact(command.argv),
    }
    return with_settings(cell, settings), record
