"""What the DAG answers about output fidelity: the KL divergence steps of a config
(`fidelity_text`, `fidelity_base`, `fidelity_kld`: their targets, inputs and params), a floor
run's reference and what a cell's card compares its outputs with. `FidelitySteps` is built once
by dag.build_dag from what it declares and held as `Dag.fidelity_steps`. Stdlib and parse-time
modules only, as dag.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..atomic import param_json
from ..fidelity.kld_plan import KldModel, KldSettings, KldStep, failure_key, kld_models
from ..fidelity.pairs import (
    FLOOR,
    QUANT,
    FidelitySettings,
    Pair,
    floor_id,
    floor_of,
    measured_pairs,
)
from ..vocabulary import Cell, point_part


class UnknownCell(LookupError):
    """A target names a cell this config does not have."""


@dataclass
class FidelitySteps:
    """The fidelity part of the DAG, from exactly what it reads: the config's `models` and
    `engines` and its fidelity settings (each model's reference quant and goal), the cells, the
    measured pairs by cell, the models with KL divergence steps (fidelity.kld_plan.kld_models, run
    once, by `of_config`), the failure counts (the Dag's own dict: a healed cell bumps it) and
    `path(rule, key, **wildcards)`, one of a rule's files for one job."""

    models: dict[str, Any]
    engines: dict[str, Any]
    settings: FidelitySettings
    cells: dict[str, Cell]
    pairs: dict[str, Pair]
    kld: dict[str, KldModel]
    failed_attempts: dict[str, int]
    path: Callable[..., str]

    @classmethod
    def of_config(
        cls,
        config: dict[str, Any],
        cells: dict[str, Cell],
        failed_attempts: dict[str, int],
        path: Callable[..., str],
    ) -> FidelitySteps:
        """A config's: its pairs and KL divergence steps, each found once."""
        settings = FidelitySettings.of_config(config)
        pairs = measured_pairs(list(cells.values()), settings.references)
        return cls(
            models=config["models"],
            engines=config["engines"],
            settings=settings,
            cells=cells,
            pairs={pair.cell: pair for pair in pairs},
            kld=kld_models(config, list(cells.values())),
            failed_attempts=failed_attempts,
            path=path,
        )

    # --- distribution fidelity (llama-perplexity) ---------------------------------------------

    def kld_targets(self) -> list[str]:
        """Each quant's KL divergence record: none for a model whose reference quant is no GGUF
        or that no llamacpp engine with `launch: build` runs."""
        return [
            self.path("fidelity_kld", "record", weights=f"{model}__{quant}")
            for model, plan in self.kld.items()
            for quant in plan.quants
        ]

    def kld_plan(self, model: str) -> KldModel:
        if model not in self.kld:
            raise UnknownCell(f"model {model!r} has no KL divergence step in this config")
        return self.kld[model]

    def kld_quant(self, key: str) -> tuple[KldModel, str]:
        """The model's plan and the quant a `model__quant` key names (any GGUF quant it lists:
        the reference itself measured against its own logits reads KL 0)."""
        model, _, quant = key.partition("__")
        plan = self.kld_plan(model)
        if quant not in self.models[model]["quants"]:
            raise UnknownCell(f"model {model!r} has no quant {quant!r}")
        return plan, quant

    def fidelity_text_settings(self) -> str:
        settings = KldSettings()
        return param_json({"dataset": settings.dataset, "text_chars": settings.text_chars})

    def fidelity_step(self, model: str, quant: str) -> str:
        plan = self.kld_plan(model)
        build = self.engines[plan.engine].get("build") or {}
        return param_json(KldStep.of(plan, quant, build).to_dict())

    def fidelity_failures(self, model: str, quant: str) -> int:
        return self.failed_attempts.get(failure_key(model, quant), 0)

    def fidelity_base_inputs(self, model: str) -> dict[str, str]:
        """The text, the engine stamp of the tool's build, the reference's weights."""
        plan = self.kld_plan(model)
        return {
            "text": self.path("fidelity_text", "text"),
            "engine": self.path("engine", "stamp", engine=plan.engine),
            "weights": self.path("weights", "manifest", weights=plan.reference_key),
        }

    def fidelity_kld_inputs(self, key: str) -> dict[str, str]:
        """The base step's record and logits besides the text, the stamp and the quant's
        weights: a new quant runs its own step only."""
        plan, _ = self.kld_quant(key)
        return {
            **self.fidelity_base_inputs(plan.model),
            "weights": self.path("weights", "manifest", weights=key),
            "base": self.path("fidelity_base", "record", model=plan.model),
            "logits": self.path("fidelity_base", "logits", model=plan.model),
        }

    # --- a floor run's reference ------------------------------------------------------------

    def floor_reference(self, cell_id: str) -> str | None:
        """A floor run's reference's metrics.json (None for any other cell): the floor run
        waits for it and is not started when it did not finish (cell.run.check_inputs)."""
        reference = floor_of(cell_id)
        if reference is None or reference not in self.cells:
            return None
        return self.path("cell", "metrics", cell=reference)

    # --- what a card compares ---------------------------------------------------------------

    def card_fidelity(self, cell_id: str) -> dict[str, str]:
        """What a cell's card compares its outputs with: the reference's metrics.json (its
        records beside it), the reference's floor run's, a quant's KL record; a reference cell's
        own floor run; a sweep point's, its series' family file (`fidelity_family`)."""
        pair = self.pairs.get(cell_id)
        out = {}
        reference = pair.reference_cell if pair else cell_id
        if pair:
            out["fidelity_reference"] = self.path("cell", "metrics", cell=reference)
            kld = self.path("fidelity_kld", "record", weights=self.cells[cell_id].weights_key)
            if pair.kind == QUANT and kld in self.kld_targets():
                out["kld"] = kld
        if floor_id(reference) in self.cells:
            out["fidelity_floor"] = self.path("cell", "metrics", cell=floor_id(reference))
        series = self.family_of(cell_id)
        if series is not None:
            out["fidelity_family"] = self.path("fidelity_family", "family", series=series)
        return out

    @cached_property
    def families(self) -> dict[str, list[Pair]]:
        """Each sweep series whose points are pairs, by series (every point of a series is the
        same kind of pair), its pairs in load order: fidelity.series judges them as a family.
        A series of one point is no family."""
        out: dict[str, list[Pair]] = {}
        for pair in self.pairs.values():
            sweep = self.cells[pair.cell].sweep
            if sweep is not None and pair.kind != FLOOR:
                out.setdefault(sweep.series, []).append(pair)
        for members in out.values():
            members.sort(key=lambda p: self.cells[p.cell].sweep.value)
        return {series: members for series, members in out.items() if len(members) > 1}

    def family_of(self, cell_id: str) -> str | None:
        """The series whose family a sweep point's card reads (None: no family)."""
        cell = self.cells.get(cell_id)
        if cell_id not in self.pairs or cell is None or cell.sweep is None:
            return None
        return cell.sweep.series if cell.sweep.series in self.families else None

    def family_targets(self) -> list[str]:
        return [self.path("fidelity_family", "family", series=s) for s in self.families]

    def family_members(self, series: str) -> list[Pair]:
        if series not in self.families:
            raise UnknownCell(f"series {series!r} has no fidelity family in this config")
        return self.families[series]

    def family_inputs(self, series: str) -> dict[str, str]:
        """Each point's metrics.json, its reference's and that one's floor run's (`point_<i>`,
        `point_<i>_reference`, `point_<i>_floor`), in load order."""
        out = {}
        for i, member in enumerate(self.family_members(series)):
            out[f"point_{i}"] = self.path("cell", "metrics", cell=member.cell)
            out[f"point_{i}_reference"] = self.path("cell", "metrics", cell=member.reference_cell)
            if floor_id(member.reference_cell) in self.cells:
                floor = floor_id(member.reference_cell)
                out[f"point_{i}_floor"] = self.path("cell", "metrics", cell=floor)
        return out

    def family_settings(self, series: str) -> str:
        """The family rule's param: each point's cell, its name (`c8`) and its input key."""
        members = []
        for i, member in enumerate(self.family_members(series)):
            sweep = self.cells[member.cell].sweep
            label = point_part("", sweep.axis, sweep.value)
            members.append({"cell": member.cell, "label": label, "input": f"point_{i}"})
        return param_json(members)

    def card_fidelity_settings(self, cell_id: str) -> str:
        """The card's fidelity param: the pair's kind, its reference and the model's goal, a
        sweep point's own id (`point`) to find itself in its family file (`{}`: compared with
        nothing and no floor of its own)."""
        pair = self.pairs.get(cell_id)
        if pair is None:
            return param_json({"kind": "reference"} if self.card_fidelity(cell_id) else {})
        goal = self.settings.goals.get(self.cells[cell_id].model)
        settings = {"kind": pair.kind, "reference_cell": pair.reference_cell, "goal": goal}
        if self.family_of(cell_id) is not None:
            settings["point"] = cell_id
        return param_json(settings)
