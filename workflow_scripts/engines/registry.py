"""The engine adapters by kind: each adapter module registers its class here when imported
(the package's __init__ imports them all)."""

from __future__ import annotations

from .base import EngineAdapter

_REGISTRY: dict[str, type[EngineAdapter]] = {}


def register(cls: type[EngineAdapter]) -> type[EngineAdapter]:
    _REGISTRY[cls.kind] = cls
    return cls


def adapter_for(kind: str) -> EngineAdapter:
    try:
        return _REGISTRY[kind]()
    except KeyError:
        raise KeyError(  # noqa: B904 - the failed lookup is the whole story
            f"no engine adapter for kind '{kind}' (known: {', '.join(known_kinds())})"
        )


def known_kinds() -> list[str]:
    return sorted(_REGISTRY)
