"""Which cell is compared with which, and the model's reference precision. A pair's two cells
received the same prompts: same model and workload point, and:

- `drafter`: a drafter cell against the same engine, quant and point with drafter `none`;
- `quant`: a drafter-`none` cell at another quant against the reference quant on its engine;
- `engine`: such a cell whose engine runs no reference quant, against the first cell (in matrix
  order) that runs the reference quant with drafter `none` on another engine;
- `floor`: the reference of any pair against its own second run (`<cell>__floor`, same engine,
  settings and load): how often two runs of one configuration agree, batching and all. A verdict
  is judged against it, so nondeterminism alone never reads as a change.

Stdlib only: config.matrix adds the floor runs while the Snakefile is parsed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..vocabulary import NO_DRAFTER, Cell, identity_columns

QUANT, DRAFTER, ENGINE, FLOOR = "quant", "drafter", "engine", "floor"
FLOOR_PART = "floor"

# The bits a quant's name says it keeps: f32 > bf16 = f16 > q8 = fp8 > ... > q2; none: 0.
_BITS = re.compile(r"(?:^|[^a-z])(?:mxfp|nvfp|bf|fp|int|iq|f|q|i)(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class Pair:
    """`cell` compared with `reference_cell`, both cell ids."""

    cell: str
    reference_cell: str
    kind: str


def floor_id(cell_id: str) -> str:
    """The id of a cell's second run, the one its noise floor is measured against."""
    return f"{cell_id}__{FLOOR_PART}"


def floor_of(cell_id: str) -> str | None:
    """The cell a floor run repeats, or None for any other id (an id has five `__` parts:
    names may not hold `__`)."""
    parts = cell_id.split("__")
    return "__".join(parts[:-1]) if len(parts) == 6 and parts[-1] == FLOOR_PART else None


def quant_bits(quant: str) -> int:
    """How many bits a quant's name says it keeps per weight (0 when it names none)."""
    found = _BITS.search(quant)
    return int(found.group(1)) if found else 0


def reference_quant(model: Mapping[str, Any]) -> str:
    """A model's reference precision: its `reference_quant`, else the quant whose name keeps
    the most bits (the first listed of equals)."""
    if model.get("reference_quant"):
        return model["reference_quant"]
    quants = list(model["quants"])
    return max(quants, key=lambda q: (quant_bits(q), -quants.index(q)))


def reference_quants(models: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    return {name: reference_quant(model) for name, model in models.items()}


@dataclass(frozen=True)
class FidelitySettings:
    """What the fidelity rule takes from the config (its `fidelity` param): each model's
    reference quant and fidelity goal (its own, else the matrix-wide one; None: no goal)."""

    references: dict[str, str]
    goals: dict[str, dict[str, Any] | None]

    @classmethod
    def of_config(cls, config: Mapping[str, Any]) -> FidelitySettings:
        models = config["models"]
        return cls(
            references=reference_quants(models),
            goals={name: m.get("fidelity") or config.get("fidelity") for name, m in models.items()},
        )

    def to_dict(self) -> dict[str, Any]:
        return {"references": self.references, "goals": self.goals}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FidelitySettings:
        return cls(references=dict(data["references"]), goals=dict(data["goals"]))


def _key(cell: Cell, **changed: str) -> tuple[str, ...]:
    return tuple({**identity_columns(cell), **changed}.values())


def _comparable(cells: Iterable[Cell]) -> list[Cell]:
    """The cells that run and are compared: no floor run, no repeat, none blocked."""
    return [
        c for c in cells if not c.blocked and floor_of(c.id) is None and len(c.id.split("__")) == 5
    ]


def measured_pairs(cells: Sequence[Cell], references: Mapping[str, str]) -> list[Pair]:
    """The quant, drafter and engine pairs of a matrix, in matrix order (no floors)."""
    comparable = _comparable(cells)
    by_key = {_key(c): c.id for c in comparable}
    pairs: list[Pair] = []
    for cell in comparable:
        ref_quant = references.get(cell.model)
        if cell.has_drafter:
            base = by_key.get(_key(cell, drafter=NO_DRAFTER))
            if base:
                pairs.append(Pair(cell.id, base, DRAFTER))
        elif ref_quant and cell.quant != ref_quant:
            same_engine = by_key.get(_key(cell, quant=ref_quant))
            if same_engine:
                pairs.append(Pair(cell.id, same_engine, QUANT))
                continue
            other = next(
                (
                    c.id
                    for c in comparable
                    if c.engine != cell.engine
                    and _key(c, engine=cell.engine) == _key(cell, quant=ref_quant)
                ),
                None,
            )
            if other:
                pairs.append(Pair(cell.id, other, ENGINE))
    return pairs


def fidelity_pairs(cells: Sequence[Cell], references: Mapping[str, str]) -> list[Pair]:
    """Every pair, each reference's floor after the pairs it serves (where its run exists)."""
    pairs = measured_pairs(cells, references)
    ids = {c.id for c in cells}
    floors = []
    for reference in dict.fromkeys(p.reference_cell for p in pairs):
        if floor_id(reference) in ids:
            floors.append(Pair(floor_id(reference), reference, FLOOR))
    return [*pairs, *floors]


def references_needing_floor(cells: Sequence[Cell], references: Mapping[str, str]) -> set[str]:
    """The cells some pair is compared with: each gets a floor run unless its entry says not."""
    return {p.reference_cell for p in measured_pairs(cells, references)}
