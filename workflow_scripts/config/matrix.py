"""Config -> validated, defaulted config -> cells with their resolved settings.

Every error names the key path that is wrong, and all of this runs before anything is
downloaded or built.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from ..engines import adapter_for, known_kinds
from ..fidelity.pairs import floor_id, reference_quants, references_needing_floor
from ..vocabulary import (
    NO_DRAFTER,
    Cell,
    ConfigError,
    MemorySettings,
    RunSettings,
    SweepPoint,
)
from . import bounded_yaml, checks, energy, fidelity, probes, secrets, sweeps, traces
from .cell_ids import cell_id, repeat_id
from .checks import check_known, plain_copy
from .derived import resolve_derived, resolve_tokenizer_from
from .schema import check_schema

_ID_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def validate_config(config: dict[str, Any]) -> dict[str, Any]:
    """Fill defaults and check the config against the schema and its cross references."""
    if not isinstance(config, dict):
        raise ConfigError("config: expected a mapping at the top level")
    checks.check_values(config)  # before the copy: an expanded alias bomb is refused here
    secrets.check_no_secrets(config)  # before the schema's messages, which quote values
    config = plain_copy(config)
    check_schema(config)
    _check_references(config)
    checks.warn_if_exposed(config["host"])
    return config


def _check_references(config: dict[str, Any]) -> None:
    for name, engine in config["engines"].items():
        if engine["kind"] not in known_kinds():
            raise ConfigError(
                f"config key 'engines.{name}.kind': unknown engine kind '{engine['kind']}' "
                f"(known: {', '.join(known_kinds())})"
            )
        adapter_for(engine["kind"]).check_engine(name, engine)
        if engine.get("api_key_env") and not adapter_for(engine["kind"]).api_key_env_var:
            raise ConfigError(
                f"config key 'engines.{name}.api_key_env': {engine['kind']} takes an API key "
                "only on its command line, which results record; not supported"
            )
        checks.check_engine(name, engine)
    energy.check_costs(config)
    for name, drafter in config["drafters"].items():
        for kind in drafter.get("for_engine_kind", {}):
            if kind not in known_kinds():
                raise ConfigError(
                    f"config key 'drafters.{name}.for_engine_kind.{kind}': unknown engine kind "
                    f"(known: {', '.join(known_kinds())})"
                )
        if "model" in drafter:
            check_known("model", drafter["model"], config["models"], f"drafters.{name}.model")
            quants = config["models"][drafter["model"]]["quants"]
            quant = drafter.setdefault("quant", next(iter(quants)))
            check_known("quant", quant, quants, f"drafters.{name}.quant")
    for name, model in config["models"].items():
        if "reference_quant" in model:
            where = f"models.{name}.reference_quant"
            check_known("quant", model["reference_quant"], model["quants"], where)
        resolved: set[str] = set()
        for quant_name in model["quants"]:
            resolve_derived(config, name, quant_name, [], resolved)
    for name, model in config["models"].items():
        for quant_name, quant in model["quants"].items():
            resolve_tokenizer_from(config, quant["weights"], f"models.{name}.quants.{quant_name}")
    sections = ("models", "engines", "drafters", "workloads")
    names = [(f"{section}.{name}", name) for section in sections for name in config[section]]
    for model, spec in config["models"].items():  # a quant name is a file name too
        names += [(f"models.{model}.quants.{quant}", quant) for quant in spec["quants"]]
    for where, name in names:
        if not _ID_PART.fullmatch(name) or "__" in name:  # `$` alone lets "c4\n" by
            raise ConfigError(
                f"config key '{where}': names may hold ASCII letters, digits, '.', '_' "
                "and '-', must not contain '__', and start with a letter or digit"
            )
    checks.check_cells(config)
    for name, workload in config["workloads"].items():
        sweeps.check_workload(name, workload)
        probes.check_search_workload(name, workload)
        traces.check_trace_workload(name, workload)
        checks.check_think_time(name, workload)


@dataclass(frozen=True)
class Choice:
    """One cell a `cells` entry names, before anything is looked up: its names (quant None: the
    model's first), the entry's engine settings, published figures and block reason, and where
    in the config it comes from (what an error names)."""

    model: str
    engine: str
    workload: str
    where: str
    quant: str | None = None
    drafter: str = NO_DRAFTER
    settings: dict[str, Any] = field(default_factory=dict)
    reference: dict[str, Any] = field(default_factory=dict)
    reference_by_point: dict[str, dict[str, Any]] = field(default_factory=dict)
    blocked: str | None = None
    entry: int = 0  # the index of the `cells` entry it comes from


def _explicit(entry: dict[str, Any], where: str, index: int) -> Choice:
    return Choice(
        model=entry["model"],
        engine=entry["engine"],
        workload=entry["workload"],
        where=where,
        entry=index,
        quant=entry.get("quant") or None,
        drafter=entry.get("drafter") or NO_DRAFTER,
        settings=entry.get("settings", {}),
        reference=entry.get("reference", {}),
        reference_by_point=entry.get("reference_by_point", {}),
        blocked=entry.get("blocked"),
    )


def _expand(entry: dict[str, Any], index: int, config: dict[str, Any]) -> list[Choice]:
    """One `cells` entry -> the cells it names (explicit or a product)."""
    if "matrix" not in entry:
        return [_explicit(entry, f"cells[{index}]", index)]
    matrix = entry["matrix"]
    for key in ("model", "engine", "workload", "drafter"):
        section = key + "s" if key != "drafter" else "drafters"
        for name in matrix.get(key, []):
            if key == "drafter" and name == NO_DRAFTER:
                continue
            check_known(key, name, config[section], f"cells[{index}].matrix.{key}")
    out = []
    drafters = matrix.get("drafter", [NO_DRAFTER])
    for model, engine, drafter, workload in itertools.product(
        matrix["model"], matrix["engine"], drafters, matrix["workload"]
    ):
        quants = matrix.get("quant") or list(config["models"][model]["quants"])
        for quant in quants:
            if quant not in config["models"][model]["quants"] and matrix.get("quant"):
                continue  # a listed quant applies to the models that have it
            choice = dict(
                model=model, quant=quant, engine=engine, drafter=drafter, workload=workload
            )
            if any(
                all(choice.get(k) == v for k, v in ex.items()) for ex in entry.get("exclude", [])
            ):
                continue
            out.append(_explicit(choice, f"cells[{index}].matrix", index))
    if not out:
        raise ConfigError(f"config key 'cells[{index}]': the matrix selects no cell")
    return out


def choose(config: dict[str, Any]) -> Iterator[Choice]:
    """Step 1: every cell the `cells` entries name, in config order. Lazy: an entry is expanded
    (and its names checked) once the cells before it are resolved, so the first error in the
    config is the one reported."""
    for index, entry in enumerate(config["cells"]):
        yield from _expand(entry, index, config)


def drafter_for_engine(spec: dict[str, Any], engine_kind: str) -> dict[str, Any]:
    """The drafter as this engine kind spells it: its `for_engine_kind` entry's keys replace the
    top-level ones (a vLLM `ngram` with settings where llama.cpp has `ngram-simple`)."""
    base = {k: v for k, v in spec.items() if k != "for_engine_kind"}
    override = spec.get("for_engine_kind", {}).get(engine_kind)
    if not override:
        return base
    merged = {k: v for k, v in base.items() if k not in ("kind", "n_max", "settings")}
    return {**merged, "settings": {}, **override}


def _drafter_of(
    config: dict[str, Any], choice: Choice, engine_kind: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The cell's drafter spec as its engine kind spells it, and its draft weights if any."""
    if choice.drafter == NO_DRAFTER:
        return None, None
    check_known("drafter", choice.drafter, config["drafters"], f"{choice.where}.drafter")
    spec = drafter_for_engine(config["drafters"][choice.drafter], engine_kind)
    if "model" not in spec:
        return spec, None
    return spec, config["models"][spec["model"]]["quants"][spec["quant"]]["weights"]


def _engine_spec_of(config: dict[str, Any], choice: Choice) -> dict[str, Any]:
    """The engine's entry, named, with the cell's settings over the engine's; without its
    resources, energy and cost (the cell's run settings carry its energy source resolved)."""
    entry = energy.engine_entry(config["engines"][choice.engine])
    spec = plain_copy({key: value for key, value in entry.items() if key != "resources"})
    spec["name"] = choice.engine
    spec["settings"] = {**spec.get("settings", {}), **choice.settings}
    return spec


def run_settings(
    config: dict[str, Any], engine_spec: dict[str, Any], energy_source: str
) -> RunSettings:
    """The config's settings for running a cell, the engine's readiness timeout over its own,
    and the energy source it reads (config.energy)."""
    return RunSettings(
        host=config["host"],
        ready_timeout_s=engine_spec.get("ready_timeout_s", config["ready_timeout_s"]),
        memory=MemorySettings(**config["memory"]),
        context_guard=config["context_guard"],
        energy_source=energy_source,
    )


def resolve_cell(config: dict[str, Any], choice: Choice) -> Cell:
    """Step 2: one choice -> its cell. Each name is looked up (an unknown one fails naming its
    key), the drafter merged as the engine kind spells it and checked against the engine."""
    where = choice.where
    check_known("model", choice.model, config["models"], f"{where}.model")
    model = config["models"][choice.model]
    quant = choice.quant or next(iter(model["quants"]))
    check_known("quant", quant, model["quants"], f"{where}.quant")
    check_known("engine", choice.engine, config["engines"], f"{where}.engine")
    check_known("workload", choice.workload, config["workloads"], f"{where}.workload")
    workload = config["workloads"][choice.workload]
    if probes.searching(workload):
        workload = probes.template_entry(workload)
    engine_kind = config["engines"][choice.engine]["kind"]
    drafter_spec, drafter_weights = _drafter_of(config, choice, engine_kind)
    engine_spec = _engine_spec_of(config, choice)
    if drafter_spec is not None:
        adapter_for(engine_kind).check_drafter(
            choice.drafter, drafter_spec, f"{where}.drafter", runnable=not choice.blocked
        )
    model_info = {k: v for k, v in model.items() if k != "quants"}
    model_info["why_quant"] = model["quants"][quant].get("why", "")
    return Cell(
        id=cell_id(choice.model, choice.engine, quant, choice.drafter, choice.workload),
        model=choice.model,
        quant=quant,
        engine=choice.engine,
        drafter=choice.drafter,
        workload=choice.workload,
        model_info=model_info,
        weights=model["quants"][quant]["weights"],
        engine_spec=engine_spec,
        drafter_spec=drafter_spec,
        drafter_weights=drafter_weights,
        workload_spec=sweeps.cell_workload(
            sweeps.points(choice.workload, workload)[0].entry, engine_spec
        ),
        run=run_settings(
            config, engine_spec, energy.energy_source(config, choice.engine, choice.entry)
        ),
        reference=choice.reference,
        blocked=choice.blocked,
    )


def expand_points(config: dict[str, Any], cell: Cell, choice: Choice) -> list[Cell]:
    """Step 3: a cell of a sweeping workload -> one cell per point (`<workload>-c8`), in the
    configured order, each with its own published figures (`reference_by_point`); any other
    cell as it is. The points of a series that share a server run it with the prefix cache off
    (the adapter's `prefix_cache_off`, under the config's own settings): no point may be sped
    up by an earlier point's prompts still cached."""
    workload = config["workloads"][cell.workload]
    if probes.searching(workload):
        workload = probes.template_entry(workload)
    points = sweeps.points(cell.workload, workload)
    keys = {point.part[len(cell.workload) + 1 :] for point in points if point.axis}
    for key in choice.reference_by_point:
        if key not in keys:
            raise ConfigError(
                f"config key '{choice.where}.reference_by_point.{key}': not a point of workload "
                f"'{cell.workload}' (its points: {', '.join(sorted(keys)) or 'none'})"
            )
    if sweeps.axis_of(workload) is None:
        return [cell]
    shared = workload["share_server"]
    engine_spec = cell.engine_spec
    if shared:
        adapter = adapter_for(cell.engine_kind)
        settings = {**adapter.prefix_cache_off, **engine_spec["settings"]}
        engine_spec = {**engine_spec, "settings": settings}
    series = cell_id(cell.model, cell.engine, cell.quant, cell.drafter, cell.workload)
    out = []
    for point in points:
        key = point.part[len(cell.workload) + 1 :]
        sweep = SweepPoint(
            workload=cell.workload,
            axis=point.axis,
            value=point.value,
            series=series,
            shared_server=shared,
        )
        out.append(
            replace(
                cell,
                id=cell_id(cell.model, cell.engine, cell.quant, cell.drafter, point.part),
                workload=point.part,
                engine_spec=engine_spec,
                workload_spec=sweeps.cell_workload(point.entry, engine_spec),
                reference={**cell.reference, **choice.reference_by_point.get(key, {})},
                sweep=sweep,
            )
        )
    return out


def claim_id(seen: dict[str, str], cell: Cell, where: str) -> None:
    """Step 4: a cell id is one cell's: a second entry naming the same cell fails."""
    if cell.id in seen:
        raise ConfigError(
            f"config key '{where}': duplicate cell id '{cell.id}' (also from {seen[cell.id]})"
        )
    seen[cell.id] = where


def expand_repeats(cell: Cell, repeats: int) -> list[Cell]:
    """Step 5: the cell and its repeats 2..n (`<cell>__rk`; a point's repeats make series of
    their own, `<series>__rk`, each with its own server start). A blocked cell is listed once,
    never run."""
    if cell.blocked:
        return [cell]
    out = [cell]
    for k in range(2, repeats + 1):
        sweep = cell.sweep and replace(cell.sweep, series=repeat_id(cell.sweep.series, k))
        out.append(replace(cell, id=repeat_id(cell.id, k), sweep=sweep))
    return out


@dataclass(frozen=True)
class Matrix:
    """A validated config's cells and searches, built once, and the `cells` entry each comes
    from (by cell id, repeats included, and by searched series): where its resources are."""

    cells: list[Cell]
    searches: dict[str, probes.Search]
    entry_of: dict[str, int]


def build_cells(config: dict[str, Any]) -> list[Cell]:
    """All cells of a validated config, in config order; ids unique. A search's probes are not
    among them (`build_searches`): they are known only as the search walks."""
    return build_matrix(config).cells


def build_searches(config: dict[str, Any]) -> dict[str, probes.Search]:
    """Each searched series (model x engine x quant x drafter x a workload with a `search`) ->
    its search, in config order; a probe's cell is built from it by id (config.probes)."""
    return build_matrix(config).searches


def build_matrix(config: dict[str, Any]) -> Matrix:
    """Both of the above in one pass (the Snakefile needs both, and a sweep of 1000 points
    made building them a third of its parse time)."""
    cells: list[Cell] = []
    searches: dict[str, probes.Search] = {}
    entry_of: dict[str, int] = {}
    seen: dict[str, str] = {}
    for choice in choose(config):
        cell = resolve_cell(config, choice)
        if not cell.blocked:
            explicit_quant = choice.quant and not choice.where.endswith(".matrix")
            where = f"{choice.where}.quant" if explicit_quant else choice.where
            checks.check_weights_format(cell, where)
            traces.check_trace_context(config["workloads"], cell, choice.where)
        workload = config["workloads"][cell.workload]
        if probes.searching(workload) and not cell.blocked:
            claim_id(seen, cell, choice.where)
            searches[cell.id] = probes.search_series(cell.workload, cell, workload, choice.where)
            entry_of[cell.id] = choice.entry
            continue
        repeats = config["workloads"][cell.workload]["repeats"]
        for point in expand_points(config, cell, choice):
            claim_id(seen, point, choice.where)
            for repeat in expand_repeats(point, repeats):
                cells.append(repeat)
                entry_of[repeat.id] = choice.entry
    probes.check_probe_ids(seen, searches)
    fidelity.check_fidelity(config, cells, entry_of)
    cells = with_floor_runs(config, cells, entry_of)
    for cell in cells:  # repeats and floor runs too: each names files of its own
        checks.check_id_length(cell.id, f"cells[{entry_of[cell.id]}]")
    for search in searches.values():
        checks.check_id_length(search.longest_probe_id(), search.where, "a probe's id")
    return Matrix(cells=cells, searches=searches, entry_of=entry_of)


def with_floor_runs(
    config: dict[str, Any], cells: list[Cell], entry_of: dict[str, int]
) -> list[Cell]:
    """Step 6: each cell another is compared with (fidelity.pairs) runs a second time,
    `<cell>__floor` right after it (a point's makes a series of its own, `<series>__floor`):
    its noise floor, where its `cells` entry says `fidelity_floor: true`, unless its workload
    already repeats (one that keeps no outputs is refused beside it: config.fidelity)."""
    needing = references_needing_floor(cells, reference_quants(config["models"]))
    out: list[Cell] = []
    for cell in cells:
        out.append(cell)
        workload = config["workloads"][cell.workload_name]
        entry = config["cells"][entry_of[cell.id]]
        if cell.id in needing and workload["repeats"] == 1 and entry.get("fidelity_floor", False):
            sweep = cell.sweep and replace(cell.sweep, series=floor_id(cell.sweep.series))
            floor = replace(cell, id=floor_id(cell.id), sweep=sweep)
            out.append(floor)
            entry_of[floor.id] = entry_of[cell.id]
    return out


def load_config_file(path: str | Path) -> dict[str, Any]:
    try:
        data = bounded_yaml.load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    except bounded_yaml.TooLarge as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return validate_config(data)


def load_cells(path: str | Path) -> list[Cell]:
    return build_cells(load_config_file(path))
