"""Engine adapters, registered by kind (`registry`), each answering the same questions
(`base`): llama.cpp (`llamacpp`), vLLM (`vllm`), SGLang (`sglang`), with Prometheus text read by
`promtext`. An engine provisioned once per config entry (`provision`): llama.cpp built from the
pinned tree (`build_llamacpp`, the CPU features a native build compiles in: `cpu_isa`) and
proven to run here (`smoke`); the server command of a cell (`command`). Adding an engine = one
adapter module here + a config entry."""

from __future__ import annotations

from . import llamacpp, sglang, vllm  # noqa: F401  (importing them registers the adapters)
from .base import EngineAdapter, LaunchPaths, SpecCounters
from .registry import adapter_for, known_kinds, register

__all__ = ["EngineAdapter", "LaunchPaths", "SpecCounters", "adapter_for", "known_kinds", "register"]
