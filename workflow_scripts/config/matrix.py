"""Config -> validated, defaulted config -> cells with their resolved settings.

Every error names the key path that is wrong, and all of this runs before anything is
downloaded or built.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..engines import adapter_for, known_kinds
from ..vocabulary import Cell, ConfigError
from ..weights import derive

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"
NO_DRAFTER = "none"
_ID_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def cell_id(model: str, engine: str, quant: str, drafter: str, workload: str) -> str:
    """Stable readable id, e.g. `gemma3-270m__llamacpp-cpu__q4_k_m__ngram__c4`."""
    return "__".join((model, engine, quant, drafter, workload))


_REPEAT = re.compile(r"^r([0-9]+)$")


def repeat_id(base_id: str, repeat: int) -> str:
    """Repeat 1 is the cell itself (so `repeats: 1` reruns nothing); repeat k is `<cell>__rk`."""
    return base_id if repeat == 1 else f"{base_id}__r{repeat}"


def repeat_of(cell: str) -> tuple[str, int]:
    """A cell id -> (the cell it repeats, which repeat). A cell id has five `__` parts (names
    may not hold `__`), so a sixth `rN` can only be a repeat's."""
    parts = cell.split("__")
    match = _REPEAT.match(parts[-1]) if len(parts) == 6 else None
    return ("__".join(parts[:-1]), int(match.group(1))) if match else (cell, 1)


def _path(parts: tuple[Any, ...] | list[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top>"


def _validator_with_defaults(schema: dict) -> jsonschema.Validator:
    base = jsonschema.validators.validator_for(schema)

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = _copy(sub["default"])
        yield from base.VALIDATORS["properties"](validator, properties, instance, schema)

    extended = jsonschema.validators.extend(base, {"properties": set_defaults})
    return extended(schema)


def _copy(value: Any) -> Any:
    """A deep copy as plain dicts and lists (Snakemake hands JSON configs over as OrderedDicts)."""
    return json.loads(json.dumps(value))


# libyaml's loader where PyYAML has it: the schema is read at every parse of the Snakefile.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_schema() -> dict:
    return yaml.load(SCHEMA_PATH.read_text(), Loader=_YAML_LOADER)


def validate_config(config: dict[str, Any]) -> dict[str, Any]:
    """Fill defaults and check the config against the schema and its cross references."""
    if not isinstance(config, dict):
        raise ConfigError("config: expected a mapping at the top level")
    config = _copy(config)
    validator = _validator_with_defaults(load_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: (list(e.absolute_path), e.message))
    if errors:
        lines = []
        for error in errors[:10]:
            best = jsonschema.exceptions.best_match([error])
            lines.append(f"config key '{_path(best.absolute_path)}': {best.message}")
        raise ConfigError("invalid config:\n  " + "\n  ".join(lines))
    _check_references(config)
    return config


def _check_known(kind: str, name: str, known: dict, where: str) -> None:
    if name not in known:
        options = ", ".join(sorted(known)) or "none defined"
        raise ConfigError(f"config key '{where}': unknown {kind} '{name}' (known: {options})")


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
        _check_no_secrets(name, engine)
    for name, drafter in config["drafters"].items():
        for kind in drafter.get("for_engine_kind", {}):
            if kind not in known_kinds():
                raise ConfigError(
                    f"config key 'drafters.{name}.for_engine_kind.{kind}': unknown engine kind "
                    f"(known: {', '.join(known_kinds())})"
                )
        if "model" in drafter:
            _check_known("model", drafter["model"], config["models"], f"drafters.{name}.model")
            quants = config["models"][drafter["model"]]["quants"]
            quant = drafter.setdefault("quant", next(iter(quants)))
            _check_known("quant", quant, quants, f"drafters.{name}.quant")
    for name, model in config["models"].items():
        resolved: set[str] = set()
        for quant_name in model["quants"]:
            _resolve_derived(config, name, quant_name, [], resolved)
    for name, model in config["models"].items():
        for quant_name, quant in model["quants"].items():
            _resolve_tokenizer_from(config, quant["weights"], f"models.{name}.quants.{quant_name}")
    for section in ("models", "engines", "drafters", "workloads"):
        for name in config[section]:
            if not _ID_PART.match(name) or "__" in name:
                raise ConfigError(
                    f"config key '{section}.{name}': names may hold letters, digits, '.', '_' "
                    "and '-', must not contain '__', and start with a letter or digit"
                )


_SECRET_NAME = re.compile(r"(^|_)(API_?KEY|TOKEN|SECRET|PASSWORD)($|_)", re.IGNORECASE)


def _check_no_secrets(name: str, engine: dict[str, Any]) -> None:
    """A key written into the config lands in Snakemake's params and metadata, the argv in
    every result: refuse it there, and point at the environment variable instead."""
    for variable in engine.get("env", {}):
        if _SECRET_NAME.search(variable):
            raise ConfigError(
                f"config key 'engines.{name}.env.{variable}': a secret is never a config value; "
                "set it in the environment and name the variable in api_key_env "
                "(HF_TOKEN is read from the environment)"
            )
    for index, arg in enumerate(engine.get("extra_args", [])):
        if str(arg).split("=", 1)[0] == "--api-key":
            raise ConfigError(
                f"config key 'engines.{name}.extra_args[{index}]': an API key on the command "
                "line is recorded with it; name its environment variable in api_key_env"
            )


def _resolve_tokenizer_from(config: dict[str, Any], weights: dict[str, Any], where: str) -> None:
    """A synthetic model takes its tokenizer from another model's weights: copy that spec in, so
    a change to it reruns the build, and the DAG can fetch it first."""
    ref = weights.get("tokenizer_from") if weights["source"] == "synthetic" else None
    if not ref or "model" not in ref:
        return
    where = f"{where}.weights.tokenizer_from"
    _check_known("model", ref["model"], config["models"], f"{where}.model")
    quants = config["models"][ref["model"]]["quants"]
    ref.setdefault("quant", next(iter(quants)))
    _check_known("quant", ref["quant"], quants, f"{where}.quant")
    source = quants[ref["quant"]]["weights"]
    if source["source"] == "synthetic":
        raise ConfigError(f"config key '{where}': must name real weights, not a synthetic model")
    if source["source"] == "derived":
        raise ConfigError(
            f"config key '{where}': name the GGUF a derived quant was made from (same tokenizer)"
        )
    ref["weights"] = _copy(source)


def _resolve_derived(
    config: dict[str, Any], model: str, quant: str, chain: list[str], resolved: set[str]
) -> None:
    """A derived quant is made from another quant of its model: copy that entry's resolved spec
    in (a change to it reruns the derivation, and the DAG makes it first), and the conversion
    venv's pins; refuse cycles, and steps without the tool they run."""
    if quant in resolved:
        return
    quants = config["models"][model]["quants"]
    weights = quants[quant]["weights"]
    if weights["source"] == "derived":
        where = f"models.{model}.quants.{quant}.weights"
        source = weights["from"]
        _check_known("quant", source, quants, f"{where}.from")
        if source == quant or source in chain:
            loop = [*chain[chain.index(source) :], quant] if source in chain else [quant]
            raise ConfigError(
                f"config key '{where}.from': derived quants form a cycle (each made from the "
                f"next): {' -> '.join([*loop, source])}"
            )
        _resolve_derived(config, model, source, [*chain, quant], resolved)
        _check_derivation(config, weights, quants[source]["weights"], where)
        weights["derived_from"] = {
            "model": model,
            "quant": source,
            "weights": _copy(quants[source]["weights"]),
        }
        weights.pop("venv", None)
        if weights["convert"] in derive.USES_VENV:
            weights["venv"] = _copy(config["converters"]["venv"])
    resolved.add(quant)


def _check_derivation(
    config: dict[str, Any], weights: dict[str, Any], source: dict[str, Any], where: str
) -> None:
    """The conversion's one parameter (defaulted), its source's format, and its engine."""
    convert = weights["convert"]
    parameter = derive.PARAMETER[convert]
    for other in set(derive.PARAMETER.values()) - {parameter}:
        if other in weights:
            raise ConfigError(
                f"config key '{where}.{other}': not used by convert '{convert}' "
                f"(it takes '{parameter}')"
            )
    if parameter in derive.DEFAULTS:
        weights.setdefault(parameter, derive.DEFAULTS[parameter])
    elif parameter not in weights:
        raise ConfigError(
            f"config key '{where}.{parameter}': convert '{convert}' needs a llama-quantize type, "
            "e.g. q8_0 or q4_0"
        )
    if convert == "quantize":
        problem = derive.quantize_type_problem(str(weights["type"]))
        if problem:
            raise ConfigError(f"config key '{where}.type': {problem}")
    found = derive.weights_format(source)
    wanted = derive.READS[convert]
    if found and found != wanted:
        formats = {"gguf": "a GGUF file", "hf": "a Hugging Face folder"}
        raise ConfigError(
            f"config key '{where}.from': convert '{convert}' reads {formats[wanted]}, and "
            f"'{weights['from']}' is {formats[found]}"
        )
    engine = weights.get("engine")
    if convert not in derive.USES_BUILD:
        if engine is not None:
            raise ConfigError(
                f"config key '{where}.engine': convert '{convert}' runs in the conversion venv, "
                "not with an engine's tools; remove it"
            )
        return
    builds = sorted(
        name
        for name, spec in config["engines"].items()
        if spec["kind"] == "llamacpp" and spec["launch"] == "build"
    )
    needs = (
        f"convert '{convert}' needs a llama.cpp engine with launch: build (its build holds the "
        f"pinned tree's {'converter' if convert == 'hf-to-gguf' else 'llama-quantize'}; "
        f"such engines: {', '.join(builds) or 'none defined'})"
    )
    if engine is None:
        raise ConfigError(f"config key '{where}.engine': {needs}")
    _check_known("engine", engine, config["engines"], f"{where}.engine")
    if engine not in builds:
        raise ConfigError(f"config key '{where}.engine': '{engine}' is not one; {needs}")


def _expand(entry: dict[str, Any], index: int, config: dict[str, Any]) -> list[dict[str, Any]]:
    """One `cells` entry -> the cell selections it names (explicit or a product)."""
    if "matrix" not in entry:
        return [{**entry, "_where": f"cells[{index}]"}]
    matrix = entry["matrix"]
    for key in ("model", "engine", "workload", "drafter"):
        section = key + "s" if key != "drafter" else "drafters"
        for name in matrix.get(key, []):
            if key == "drafter" and name == NO_DRAFTER:
                continue
            _check_known(key, name, config[section], f"cells[{index}].matrix.{key}")
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
            out.append({**choice, "_where": f"cells[{index}].matrix"})
    if not out:
        raise ConfigError(f"config key 'cells[{index}]': the matrix selects no cell")
    return out


def drafter_for_engine(spec: dict[str, Any], engine_kind: str) -> dict[str, Any]:
    """The drafter as this engine kind spells it: its `for_engine_kind` entry's keys replace the
    top-level ones (a vLLM `ngram` with settings where llama.cpp has `ngram-simple`)."""
    base = {k: v for k, v in spec.items() if k != "for_engine_kind"}
    override = spec.get("for_engine_kind", {}).get(engine_kind)
    if not override:
        return base
    merged = {k: v for k, v in base.items() if k not in ("kind", "n_max", "settings")}
    return {**merged, "settings": {}, **override}


def build_cells(config: dict[str, Any]) -> list[Cell]:
    """All cells of a validated config, in config order; ids unique."""
    cells: list[Cell] = []
    seen: dict[str, str] = {}
    for index, entry in enumerate(config["cells"]):
        for choice in _expand(entry, index, config):
            where = choice.pop("_where")
            _check_known("model", choice["model"], config["models"], f"{where}.model")
            model = config["models"][choice["model"]]
            quant = choice.get("quant") or next(iter(model["quants"]))
            _check_known("quant", quant, model["quants"], f"{where}.quant")
            _check_known("engine", choice["engine"], config["engines"], f"{where}.engine")
            _check_known("workload", choice["workload"], config["workloads"], f"{where}.workload")
            drafter = choice.get("drafter") or NO_DRAFTER
            drafter_spec = None
            drafter_weights = None
            if drafter != NO_DRAFTER:
                _check_known("drafter", drafter, config["drafters"], f"{where}.drafter")
                drafter_spec = drafter_for_engine(
                    config["drafters"][drafter], config["engines"][choice["engine"]]["kind"]
                )
                if "model" in drafter_spec:
                    drafter_model = config["models"][drafter_spec["model"]]
                    drafter_weights = drafter_model["quants"][drafter_spec["quant"]]["weights"]
            engine_spec = _copy(config["engines"][choice["engine"]])
            engine_spec["name"] = choice["engine"]
            workload_spec = config["workloads"][choice["workload"]]
            # repeats make more cells, never different ones: kept out of every cell's settings
            repeats = int(workload_spec.get("repeats", 1))
            workload_spec = {k: v for k, v in workload_spec.items() if k != "repeats"}
            if engine_spec.get("api_key_env") and "api_key_env" not in workload_spec:
                # the client sends the key the server requires (a workload may name another)
                workload_spec = {**workload_spec, "api_key_env": engine_spec["api_key_env"]}
            engine_spec["settings"] = {
                **engine_spec.get("settings", {}),
                **choice.get("settings", {}),
            }
            if drafter_spec is not None:
                adapter_for(engine_spec["kind"]).check_drafter(
                    drafter, drafter_spec, f"{where}.drafter", runnable=not choice.get("blocked")
                )
            new_id = cell_id(choice["model"], choice["engine"], quant, drafter, choice["workload"])
            if new_id in seen:
                raise ConfigError(
                    f"config key '{where}': duplicate cell id '{new_id}' (also from {seen[new_id]})"
                )
            seen[new_id] = where
            model_info = {k: v for k, v in model.items() if k != "quants"}
            model_info["why_quant"] = model["quants"][quant].get("why", "")
            cell = Cell(
                id=new_id,
                model=choice["model"],
                quant=quant,
                engine=choice["engine"],
                drafter=drafter,
                workload=choice["workload"],
                model_info=model_info,
                weights=model["quants"][quant]["weights"],
                engine_spec=engine_spec,
                drafter_spec=drafter_spec,
                drafter_weights=drafter_weights,
                workload_spec=workload_spec,
                run={
                    "host": config["host"],
                    "ready_timeout_s": engine_spec.get(
                        "ready_timeout_s", config["ready_timeout_s"]
                    ),
                    "memory": config["memory"],
                    "context_guard": config["context_guard"],
                },
                reference=choice.get("reference", {}),
                blocked=choice.get("blocked"),
            )
            cells.append(cell)
            if not cell.blocked:  # a blocked cell is listed once, never run
                for repeat in range(2, repeats + 1):
                    cells.append(replace(cell, id=repeat_id(new_id, repeat)))
    return cells


def load_config_file(path: str | Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    return validate_config(data)


def load_cells(path: str | Path) -> list[Cell]:
    return build_cells(load_config_file(path))
