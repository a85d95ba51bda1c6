"""llama.cpp `llama-server`: flags, drafters (`--spec-type`), `/metrics` counters, the prefix
cache's hits from each response's `timings`, and the per-slot context (`-c` is split across
`--parallel` slots)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import requests

from ..loadgen.records import RequestRecord
from ..process.auth import auth_headers
from ..vocabulary import Cell
from .base import EngineAdapter, LaunchPaths, SpecCounters, flag_args, get_json, hit_pct
from .registry import register

NGRAM_KINDS = frozenset(
    {"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"}
)
MODEL_DRAFTER_KINDS = frozenset({"draft-simple", "draft-mtp", "draft-eagle3"})
# The drafter's `n_max` (most tokens drafted per step) is a different flag per kind:
# `--spec-draft-n-max` only applies to model drafters; n-gram drafters have their own.
N_MAX_FLAGS = {
    "ngram-simple": "--spec-ngram-simple-size-m",
    "ngram-map-k": "--spec-ngram-map-k-size-m",
    "ngram-map-k4v": "--spec-ngram-map-k4v-size-m",
    "ngram-mod": "--spec-ngram-mod-n-max",
    **{kind: "--spec-draft-n-max" for kind in MODEL_DRAFTER_KINDS},
}

# Config settings -> llama-server flags, in the order llama.cpp's docs (and the published
# GB10 command) write them: capacity before the drafter, kernels after it.
CAPACITY_FLAGS = (("n_gpu_layers", "-ngl"), ("ctx_size", "-c"), ("parallel", "--parallel"))
KERNEL_FLAGS = (
    ("flash_attn", "-fa"),
    ("threads", "-t"),
    ("batch_size", "-b"),
    ("ubatch_size", "-ub"),
)
# Settings with their own rendering; everything else passes through as `--key value`.
SPECIAL_SETTINGS = frozenset({"cont_batching", "metrics", "port"})
CONTEXT_PAD_TOKENS = 256


def _on_off(value: Any) -> str:
    if value is True:
        return "on"
    if value is False:
        return "off"
    return str(value)


@register
class LlamaCppAdapter(EngineAdapter):
    kind = "llamacpp"
    drafter_kinds = NGRAM_KINDS | MODEL_DRAFTER_KINDS
    drafter_kinds_needing_model = MODEL_DRAFTER_KINDS
    launch_modes = frozenset({"build", "native", "docker"})
    perplexity_launches = frozenset({"build"})  # the pinned tree builds it beside the server
    version_path = "/props"
    default_port = 8080
    api_key_env_var = "LLAMA_API_KEY"
    splits_context = True
    context_setting = "ctx_size"
    weight_formats = frozenset({"gguf"})
    # no reuse of a slot's cached prefix, no host-memory prompt cache
    prefix_cache_off = {"cache_prompt": False, "cache_ram": 0}
    setting_types = {
        **{key: ("integer",) for key in ("port", "ctx_size", "parallel", "threads")},
        **{key: ("integer",) for key in ("batch_size", "ubatch_size")},
        "n_gpu_layers": ("integer", "string"),  # `all`, `auto` in newer builds
        "flash_attn": ("boolean", "string"),  # on, off, auto
        "cont_batching": ("boolean",),
        "metrics": ("boolean",),
    }

    def settings(self, cell: Cell) -> dict[str, Any]:
        """Engine settings with llama.cpp's defaults: one slot per concurrent request, and
        `/metrics` on (the spec-decode counters live there)."""
        merged: dict[str, Any] = {
            "parallel": cell.concurrency,
            "cont_batching": True,
            "metrics": True,
        }
        merged.update(cell.engine_spec["settings"])
        return merged

    def per_slot_context(self, cell: Cell) -> int | None:
        settings = self.settings(cell)
        if settings.get("ctx_size") is None:
            return None
        return int(settings["ctx_size"]) // max(1, int(settings["parallel"]))

    def server_args(self, cell: Cell, paths: LaunchPaths) -> list[str]:
        settings = self.settings(cell)
        args = ["-m", paths.weights]
        handled = set(SPECIAL_SETTINGS)
        for key, flag in CAPACITY_FLAGS:
            handled.add(key)
            if settings.get(key) is not None:
                args += [flag, str(settings[key])]
        if settings.get("cont_batching") is not None:
            args.append("-cb" if settings["cont_batching"] else "-nocb")
        if cell.drafter_spec:
            args += self._drafter_args(cell.drafter_spec, paths)
        for key, flag in KERNEL_FLAGS:
            handled.add(key)
            if settings.get(key) is not None:
                value = _on_off(settings[key]) if key == "flash_attn" else str(settings[key])
                args += [flag, value]
        args += flag_args({k: v for k, v in settings.items() if k not in handled})
        if settings.get("metrics"):
            args.append("--metrics")
        args += ["--host", paths.host, "--port", str(paths.port)]
        args += [str(a) for a in cell.engine_spec["extra_args"]]
        return args

    @staticmethod
    def _drafter_args(spec: dict[str, Any], paths: LaunchPaths) -> list[str]:
        args = []
        if spec["kind"] in MODEL_DRAFTER_KINDS:
            args += ["--model-draft", str(paths.drafter_weights)]
        args += ["--spec-type", spec["kind"]]
        if "n_max" in spec and spec["kind"] in N_MAX_FLAGS:
            args += [N_MAX_FLAGS[spec["kind"]], str(spec["n_max"])]
        args += flag_args(spec.get("settings", {}))
        return args

    def docker_program(self, image: str) -> list[str]:
        """The `full*` images run a dispatcher script (`tools.sh`) that needs `--server`;
        the `server*` images have llama-server as their entrypoint."""
        name = image.rsplit("/", 1)[-1]
        tag = name.split(":", 1)[1] if ":" in name else ""
        return ["--server"] if tag.startswith("full") else []

    def parse_version(self, document: Any) -> str | None:
        return document.get("build_info") if isinstance(document, dict) else None

    def parse_spec_metrics(self, text: str) -> SpecCounters:
        from .promtext import counters

        values = counters(text, prefix="llamacpp:")
        per_pos = values.get("spec_decode_num_accepted_tokens_per_pos_total", {})
        return SpecCounters(
            drafts=values.get("spec_decode_num_drafts_total", {}).get(()),
            draft_tokens=values.get("spec_decode_num_draft_tokens_total", {}).get(()),
            accepted_tokens=values.get("spec_decode_num_accepted_tokens_total", {}).get(()),
            accepted_per_pos=[per_pos[k] for k in sorted(per_pos, key=lambda k: int(k[0][1]))],
        )

    def prefix_cache_hit_pct(
        self, records: Sequence[RequestRecord], before: str | None, after: str | None
    ) -> float | None:
        """Each response's `timings`: `cache_n` prompt tokens reused from the slot's cache,
        `prompt_n` evaluated (tools/server/server-common.cpp, `server_slot_stats::to_json`);
        100 * sum(cache_n) / sum(cache_n + prompt_n) over the completed measured requests."""
        timings = [r.timings for r in records if r.timings and "cache_n" in r.timings]
        if not timings:
            return None
        cached = sum(float(t["cache_n"] or 0) for t in timings)
        return hit_pct(cached, cached + sum(float(t.get("prompt_n") or 0) for t in timings))

    # -- context per slot -------------------------------------------------------------------
    def served_per_slot_context(self, base_url: str) -> int | None:
        """`/props` reports the slot context after llama.cpp's own capping (training context,
        `--kv-unified-per-slot`), so it beats arithmetic on the flags."""
        props = get_json(base_url + "/props")
        try:
            return int(props["default_generation_settings"]["n_ctx"])
        except (TypeError, KeyError, ValueError):
            return None

    def trained_context(self, base_url: str) -> int | None:
        models = get_json(base_url + "/v1/models")
        try:
            return int(models["data"][0]["meta"]["n_ctx_train"])
        except (TypeError, KeyError, IndexError, ValueError):
            return None

    def count_prompt_tokens(self, base_url: str, text: str, endpoint: str) -> int:
        """As the server counts a request: the chat template applied (`/apply-template`), then
        tokenized with special tokens added and parsed, as llama-server does for completions."""
        content = text
        if endpoint == "chat":
            resp = requests.post(
                base_url + "/apply-template",
                json={"messages": [{"role": "user", "content": text}]},
                headers=auth_headers(),
                timeout=60,
            )
            resp.raise_for_status()
            content = resp.json()["prompt"]
        resp = requests.post(
            base_url + "/tokenize",
            json={"content": content, "add_special": True, "parse_special": True},
            headers=auth_headers(),
            timeout=60,
        )
        resp.raise_for_status()
        return len(resp.json()["tokens"])

    def sized_settings(self, cell: Cell, per_slot_tokens: int) -> dict[str, Any]:
        per_slot = -(-per_slot_tokens // CONTEXT_PAD_TOKENS) * CONTEXT_PAD_TOKENS
        parallel = max(1, int(self.settings(cell)["parallel"]))
        return {"ctx_size": per_slot * parallel}

    def tokenizer_only_settings(self, cell: Cell) -> dict[str, Any]:
        """One small slot, nothing on the GPU, no warmup or repacking: the model file is
        mapped, not read, so even a 12B GGUF answers `/tokenize` within seconds."""
        return {
            "ctx_size": CONTEXT_PAD_TOKENS * 2,
            "parallel": 1,
            "n_gpu_layers": 0,
            "flash_attn": None,
            "metrics": False,
            "no_warmup": True,
            "no_repack": True,
        }
