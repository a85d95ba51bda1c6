"""A cell's id and its repeats' ids: `model__engine__quant__drafter__workload`, and
`<cell>__rk` for repeat k (k ≥ 2). Names hold no `__`, so the parts read back unambiguously."""

from __future__ import annotations

import re

_REPEAT = re.compile(r"^r([0-9]+)$")


def cell_id(model: str, engine: str, quant: str, drafter: str, workload: str) -> str:
    """Stable readable id, e.g. `gemma3-270m__llamacpp-cpu__q4_k_m__ngram__c4`."""
    return "__".join((model, engine, quant, drafter, workload))


def repeat_id(base_id: str, repeat: int) -> str:
    """Repeat 1 is the cell itself (so `repeats: 1` reruns nothing); repeat k is `<cell>__rk`."""
    return base_id if repeat == 1 else f"{base_id}__r{repeat}"


def repeat_of(cell: str) -> tuple[str, int]:
    """A cell id -> (the cell it repeats, which repeat). A cell id has five `__` parts (names
    may not hold `__`), so a sixth `rN` can only be a repeat's."""
    parts = cell.split("__")
    match = _REPEAT.match(parts[-1]) if len(parts) == 6 else None
    return ("__".join(parts[:-1]), int(match.group(1))) if match else (cell, 1)
