"""Engine adapters, registered by kind. Adding an engine = one module here + a config entry."""

from __future__ import annotations

from .base import EngineAdapter, LaunchPaths, SpecCounters

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


from . import llamacpp, sglang, vllm  # noqa: E402,F401  (registers the adapters)

__all__ = ["EngineAdapter", "LaunchPaths", "SpecCounters", "adapter_for", "known_kinds", "register"]
