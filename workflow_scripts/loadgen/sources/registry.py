"""The prompt sources by dataset kind: each source module registers its loader here when
imported (the package's __init__ imports them all)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..prompts import Dataset, DatasetError

# A workload's `dataset` mapping and how many prompts it asks for -> its prompts.
Loader = Callable[[Mapping[str, Any], int], Dataset]

_REGISTRY: dict[str, Loader] = {}


def register(kind: str) -> Callable[[Loader], Loader]:
    """The decorator that makes a loader the source of dataset kind `kind`."""

    def add(loader: Loader) -> Loader:
        _REGISTRY[kind] = loader
        return loader

    return add


def load_source(spec: Mapping[str, Any], num_prompts: int) -> Dataset:
    """The prompts of `spec` from the source registered for its `kind`."""
    kind = spec["kind"]
    if kind not in _REGISTRY:
        raise DatasetError(f"unknown dataset kind '{kind}'")
    return _REGISTRY[kind](spec, num_prompts)


def known_kinds() -> list[str]:
    return sorted(_REGISTRY)
