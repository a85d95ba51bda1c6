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
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..engines.base import EngineAdapter
from ..engines.command import cell_server_command, cell_weights
from ..loadgen.datasets import Prompt
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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def enforce(self) -> None:
        """Raise when the cell must not load: `fail` with any misfit, or nothing left to send."""
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


def count_tokens(
    adapter: EngineAdapter, base_url: str, prompts: list[Prompt], endpoint: str
) -> dict[int, int]:
    """Prompt index -> tokens the server will see for it, counted by the server itself."""
    with ThreadPoolExecutor(COUNT_WORKERS) as pool:
        counts = pool.map(
            lambda p: adapter.count_prompt_tokens(base_url, p.text, endpoint), prompts
        )
        return {p.index: n for p, n in zip(prompts, counts, strict=True)}


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
    counts = count_tokens(adapter, base_url, prompts, workload.endpoint)
    report.checked = len(counts)
    report.longest_prompt_tokens = max(counts.values(), default=None)
    kept = []
    for prompt in prompts:
        if counts[prompt.index] + max_tokens > per_slot:
            report.skipped.append({"index": prompt.index, "prompt_tokens": counts[prompt.index]})
        else:
            kept.append(prompt)
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
    every slot room for the longest prompt + max_tokens. Returns the sized cell and a record."""
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
    needed = longest + cell.workload_spec.max_tokens
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
