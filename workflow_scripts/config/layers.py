"""A setting given matrix-wide, per engine and per `cells` entry: its layers, the broadest first
(`resources` merges them key by key, `energy` and `cost` take the narrowest given)."""

from __future__ import annotations

from typing import Any


def layers(config: dict[str, Any], key: str, engine: str, entry: int | None = None) -> list[Any]:
    """`key`'s value matrix-wide, in engine `engine`'s entry and (`entry`: its index) in that
    `cells` entry, those given, in that order."""
    found = [config.get(key), config["engines"][engine].get(key)]
    if entry is not None:
        found.append(config["cells"][entry].get(key))
    return [layer for layer in found if layer is not None]
