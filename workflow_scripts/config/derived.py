"""Weights made from other weights, resolved at validation: a derived quant takes a copy of the
entry it is made from (and the converter's pins), a synthetic model the weights its tokenizer
comes from; so a change to a source reruns what is made from it, and the DAG makes it first."""

from __future__ import annotations

from typing import Any

from ..vocabulary import ConfigError
from ..weights import derive
from .checks import FORMAT_NAMES, check_known, plain_copy


def resolve_tokenizer_from(config: dict[str, Any], weights: dict[str, Any], where: str) -> None:
    """A synthetic model takes its tokenizer from another model's weights: copy that spec in, so
    a change to it reruns the build, and the DAG can fetch it first."""
    ref = weights.get("tokenizer_from") if weights["source"] == "synthetic" else None
    if not ref or "model" not in ref:
        return
    where = f"{where}.weights.tokenizer_from"
    check_known("model", ref["model"], config["models"], f"{where}.model")
    quants = config["models"][ref["model"]]["quants"]
    ref.setdefault("quant", next(iter(quants)))
    check_known("quant", ref["quant"], quants, f"{where}.quant")
    source = quants[ref["quant"]]["weights"]
    if source["source"] == "synthetic":
        raise ConfigError(f"config key '{where}': must name real weights, not a synthetic model")
    if source["source"] == "derived":
        raise ConfigError(
            f"config key '{where}': name the GGUF a derived quant was made from (same tokenizer)"
        )
    ref["weights"] = plain_copy(source)


def resolve_derived(
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
        check_known("quant", source, quants, f"{where}.from")
        if source == quant or source in chain:
            loop = [*chain[chain.index(source) :], quant] if source in chain else [quant]
            raise ConfigError(
                f"config key '{where}.from': derived quants form a cycle (each made from the "
                f"next): {' -> '.join([*loop, source])}"
            )
        resolve_derived(config, model, source, [*chain, quant], resolved)
        check_derivation(config, weights, quants[source]["weights"], where)
        weights["derived_from"] = {
            "model": model,
            "quant": source,
            "weights": plain_copy(quants[source]["weights"]),
        }
        weights.pop("venv", None)
        if weights["convert"] in derive.USES_VENV:
            weights["venv"] = plain_copy(config["converters"]["venv"])
    resolved.add(quant)


def check_derivation(
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
        raise ConfigError(
            f"config key '{where}.from': convert '{convert}' reads {FORMAT_NAMES[wanted]}, and "
            f"'{weights['from']}' is {FORMAT_NAMES[found]}"
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
    check_known("engine", engine, config["engines"], f"{where}.engine")
    if engine not in builds:
        raise ConfigError(f"config key '{where}.engine': '{engine}' is not one; {needs}")
