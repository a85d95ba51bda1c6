"""SGLang (`python3 -m sglang.launch_server`): `--model-path` as a hub id (or a path), drafters
as `--speculative-algorithm` and its step/top-k/draft-token flags. Acceptance comes from each
response's `sglext.spec_tokens_details` when the server returns them, else from `/server_info`
(`/get_server_info` on older builds): a running mean over the server's life, read at warmup end
and at bench end (`specdecode.acceptance_from_server_info` takes the difference). The prefix
cache's hits are its `/metrics` token counters, there only with `--enable-metrics`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..loadgen.records import RequestRecord
from ..vocabulary import Cell
from .base import HubModelAdapter, LaunchPaths, SpecCounters, flag_args, hit_pct
from .registry import register

# drafter kind -> `--speculative-algorithm`
ALGORITHMS = {
    "nextn": "NEXTN",
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "standalone": "STANDALONE",
    "ngram": "NGRAM",
}
NEEDS_MODEL = frozenset({"eagle", "eagle3", "standalone"})
# The order SGLang's server arguments declare them in (quantization, then the KV cache dtype);
# the published GB10 commands write them so too.
SETTING_ORDER = (
    "context_length",
    "mem_fraction_static",
    "max_running_requests",
    "tp_size",
    "quantization",
    "kv_cache_dtype",
    "served_model_name",
)
# Drafter flags in the order AxionML's NEXTN recipe (and the published command) writes them.
DRAFTER_ORDER = (
    "speculative_draft_model_path",
    "speculative_draft_model_revision",
    "speculative_draft_model_quantization",
    "speculative_num_steps",
    "speculative_num_draft_tokens",
    "speculative_eagle_topk",
)


@register
class SglangAdapter(HubModelAdapter):
    kind = "sglang"
    drafter_kinds = frozenset(ALGORITHMS)
    drafter_kinds_needing_model = NEEDS_MODEL
    metrics_path = "/server_info"  # where acceptance is; `/metrics` needs --enable-metrics
    version_path = "/server_info"
    path_fallbacks = {"/server_info": "/get_server_info"}  # the old name, now a deprecated alias
    spec_request_fields = {"return_spec_tokens_details": True}
    default_port = 30000
    model_flag = ("--model-path",)
    launch_modes = frozenset({"native", "docker", "venv"})
    server_module = "sglang.launch_server"
    setting_order = SETTING_ORDER
    docker_args = ("--shm-size", "32g")
    weight_formats = frozenset({"hf", "gguf"})  # a GGUF as one local file
    prefix_cache_off = {"disable_radix_cache": True}
    context_setting = "context_length"
    prefix_cache_path = "/metrics"  # only with `--enable-metrics` (settings: enable_metrics)
    setting_types = {
        "port": ("integer",),
        "mem_fraction_static": ("number",),
        **{key: ("integer",) for key in ("context_length", "max_running_requests", "tp_size")},
        **{key: ("integer",) for key in ("dp_size", "chunked_prefill_size", "max_total_tokens")},
    }

    def drafter_args(self, spec: dict[str, Any], paths: LaunchPaths) -> list[str]:
        """`n_max` is the draft depth: `--speculative-num-steps` for tree drafters (with a
        chain, top-k 1, of n_max + 1 tokens to verify), the draft-token count for NGRAM.
        Drafter settings become `--speculative-<key>` flags and win over these defaults."""
        algorithm = ALGORITHMS[spec["kind"]]
        flags: dict[str, Any] = {}
        model, revision = self.drafter_model(paths)
        if model:
            flags["speculative_draft_model_path"] = model
            if revision:
                flags["speculative_draft_model_revision"] = revision
        if "n_max" in spec:
            n_max = spec["n_max"]
            if algorithm == "NGRAM":
                flags["speculative_num_draft_tokens"] = n_max
            else:
                flags["speculative_num_steps"] = n_max
                flags["speculative_eagle_topk"] = 1
                flags["speculative_num_draft_tokens"] = n_max + 1
        for key, value in spec.get("settings", {}).items():
            name = key if key.startswith("speculative_") else f"speculative_{key}"
            flags[name] = value
        return ["--speculative-algorithm", algorithm, *flag_args(flags, DRAFTER_ORDER)]

    def docker_program(self, image: str) -> list[str]:
        """SGLang images have no server entrypoint: the command names the module."""
        return ["python3", "-m", self.server_module]

    def served_model(self, cell: Cell, paths: LaunchPaths) -> str | None:
        return self.settings(cell).get("served_model_name") or self.model_ref(paths)

    def parse_version(self, document: Any) -> str | None:
        return document.get("version") if isinstance(document, dict) else None

    def parse_spec_metrics(self, text: str) -> SpecCounters:
        """`/server_info` -> `internal_states[0].avg_spec_accept_length` (absent before the first
        verify step on older builds)."""
        try:
            states = json.loads(text).get("internal_states") or [{}]
        except (ValueError, AttributeError):
            return SpecCounters()
        value = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
        return SpecCounters(accept_length=float(value) if value is not None else None)

    def prefix_cache_hit_pct(
        self, records: Sequence[RequestRecord], before: str | None, after: str | None
    ) -> float | None:
        """`sglang:cached_tokens_total` / `sglang:prompt_tokens_total` (counted per finished
        request, python/sglang/srt/metrics/collector.py), their growth over the measured run.
        The cached counter appears at its first increment: absent with prompts counted is 0. Its
        `sglang:cache_hit_rate` gauge is the last batch's rate, not the run's, so it is not read."""
        from .promtext import counter_delta

        prompt = counter_delta(before, after, "sglang:", "prompt_tokens_total")
        cached = counter_delta(before, after, "sglang:", "cached_tokens_total")
        return hit_pct(cached or 0.0, prompt)
