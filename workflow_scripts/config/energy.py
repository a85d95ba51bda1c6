"""What a token costs, as the config says it: which energy counter each cell reads (`energy`,
resolved into the cell's run settings: it changes what metrics.json holds, so it is part of the
cell's settings) and what the machine or its energy costs (`cost`, kept out of every cell's and
engine step's settings: a price says nothing about what is measured, so editing one reruns no
cell; the tables read it, `prices_by_cell`).

The source rule, the one place it is decided (docs/metrics.md, "Energy"): `auto` reads NVML
where the cell's server uses GPUs, and RAPL otherwise. A server uses GPUs when the config says
so in any of the three ways it can: its `resources.gpu` above 0 (what the scheduler gives it),
its engine's `env` naming a device in CUDA_VISIBLE_DEVICES, or a docker engine with `--gpus`
(`docker.gpus` not empty). Which GPUs NVML reads is the server's own CUDA_VISIBLE_DEVICES when
it runs (cell.energy).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..vocabulary import ENERGY_AUTO, ENERGY_NVML, ENERGY_RAPL, Cell, ConfigError
from .layers import layers

VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
HIDDEN = ("", "-1")  # CUDA_VISIBLE_DEVICES values that hide every GPU
PRICES = ("usd_per_hour", "usd_per_kwh")
# What only the cells' tables read (cost) or the cell carries resolved (energy): kept out of
# the engines' entries that the cells' and the engine step's settings are made from.
ENGINE_KEYS_LEFT_OUT = ("energy", "cost")


def energy_setting(config: dict[str, Any], engine: str) -> str:
    """`energy.source` as set for `engine`'s cells: its engine's, else the matrix-wide one."""
    found = [layer.get("source") for layer in layers(config, "energy", engine)]
    given = [source for source in found if source is not None]
    return given[-1] if given else ENERGY_AUTO


def gpus_of(config: dict[str, Any], engine: str, entry: int) -> int:
    """The GPUs a cell asks for (`resources.gpu`, layered as config.resources layers it)."""
    merged: dict[str, Any] = {}
    for layer in layers(config, "resources", engine, entry):
        merged.update(layer)
    return int(merged.get("gpu") or 0)


def serves_on_gpus(engine_spec: dict[str, Any], gpus: int) -> bool:
    """Whether the config says the cell's server uses GPUs: `gpus` (its resources.gpu) above 0,
    its engine's env naming a device, or a docker launch with `--gpus`."""
    visible = (engine_spec.get("env") or {}).get(VISIBLE_DEVICES)
    docker = engine_spec.get("docker") or {}
    return (
        gpus > 0
        or (visible is not None and str(visible).strip() not in HIDDEN)
        or (engine_spec.get("launch") == "docker" and bool(docker.get("gpus")))
    )


def energy_source(config: dict[str, Any], engine: str, entry: int) -> str:
    """The source the cells of `engine` from `cells` entry `entry` read: the setting, with
    `auto` resolved by the rule of the module's docstring."""
    setting = energy_setting(config, engine)
    if setting != ENERGY_AUTO:
        return setting
    spec = config["engines"][engine]
    return ENERGY_NVML if serves_on_gpus(spec, gpus_of(config, engine, entry)) else ENERGY_RAPL


def check_costs(config: dict[str, Any]) -> None:
    """One price per `cost` (the schema judges each value: a number above 0, no other key):
    a rented machine's hourly price already holds its power, so the two bases are never added."""
    places = [("cost", config.get("cost"))]
    places += [(f"engines.{name}.cost", e.get("cost")) for name, e in config["engines"].items()]
    for where, cost in places:
        if cost and all(key in cost for key in PRICES):
            raise ConfigError(
                f"config key '{where}': give usd_per_hour (the machine's price per hour) or "
                "usd_per_kwh (the energy's price alone), not both: a machine's hourly price "
                "already pays for its power"
            )


def cost_of(config: dict[str, Any], engine: str) -> dict[str, float] | None:
    """The price `engine`'s cells are costed at: its own `cost`, else the matrix-wide one
    (whole, never merged: one basis), else None (no dollar figure)."""
    given = layers(config, "cost", engine)
    return dict(given[-1]) if given else None


def prices_by_cell(config: dict[str, Any], cells: Iterable[Cell]) -> dict[str, Any]:
    """Cell id (or searched series) -> its price or None: what the tables read (a search's
    probe takes its series')."""
    return {cell.id: cost_of(config, cell.engine) for cell in cells}


def engine_entry(spec: dict[str, Any]) -> dict[str, Any]:
    """An engine's entry without what its cells carry resolved or never read (`energy`,
    `cost`): what a cell's engine spec and the engine step's settings are made from."""
    return {key: value for key, value in spec.items() if key not in ENGINE_KEYS_LEFT_OUT}


def without_prices(config: dict[str, Any]) -> dict[str, Any]:
    """The config with every `cost` removed and each engine's entry as `engine_entry` gives
    it: what the DAG's settings are built from."""
    stripped = {key: value for key, value in config.items() if key != "cost"}
    stripped["engines"] = {name: engine_entry(e) for name, e in config["engines"].items()}
    return stripped
