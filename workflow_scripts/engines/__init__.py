"""Engine adapters, registered by kind. Adding an engine = one module here + a config entry."""

from __future__ import annotations

from . import llamacpp, sglang, vllm  # noqa: F401  (importing them registers the adapters)
from .base import EngineAdapter, LaunchPaths, SpecCounters
from .registry import adapter_for, known_kinds, register

__all__ = ["EngineAdapter", "LaunchPaths", "SpecCounters", "adapter_for", "known_kinds", "register"]
