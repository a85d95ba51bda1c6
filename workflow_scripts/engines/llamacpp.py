"""llama.cpp `llama-server`: flags, drafters (`--spec-type`), `/metrics` counters."""

from __future__ import annotations

from typing import Any

from . import register
from .base import EngineAdapter, LaunchPaths, SpecCounters

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

# Config settings -> llama-server flags. Anything else goes through `extra_args`.
SETTING_FLAGS = {
    "ctx_size": "-c",
    "parallel": "--parallel",
    "threads": "-t",
    "n_gpu_layers": "-ngl",
    "batch_size": "-b",
    "ubatch_size": "-ub",
    "flash_attn": "-fa",
}


@register
class LlamaCppAdapter(EngineAdapter):
    kind = "llamacpp"
    drafter_kinds = NGRAM_KINDS | MODEL_DRAFTER_KINDS
    launch_modes = frozenset({"build", "native", "docker"})

    def check_drafter(self, name: str, spec: dict[str, Any], where: str) -> None:
        super().check_drafter(name, spec, where)
        from ..matrix import ConfigError

        if spec["kind"] in MODEL_DRAFTER_KINDS and "model" not in spec:
            raise ConfigError(
                f"config key '{where}': drafter '{name}' ({spec['kind']}) "
                "needs a draft model (drafters.<name>.model)"
            )

    def settings(self, cell) -> dict[str, Any]:
        """Engine settings with llama.cpp's defaults: one slot per concurrent request."""
        merged = {"parallel": cell.concurrency, "cont_batching": True, "metrics": True}
        merged.update(cell.engine_spec.get("settings", {}))
        return merged

    def per_slot_context(self, cell) -> int | None:
        settings = self.settings(cell)
        if "ctx_size" not in settings:
            return None
        return int(settings["ctx_size"]) // max(1, int(settings["parallel"]))

    def server_args(self, cell, paths: LaunchPaths) -> list[str]:
        settings = self.settings(cell)
        args = ["-m", paths.weights]
        for key, flag in SETTING_FLAGS.items():
            if key in settings and settings[key] is not None:
                args += [flag, str(settings[key])]
        if settings.get("cont_batching"):
            args.append("-cb")
        if cell.drafter_spec:
            args += self._drafter_args(cell.drafter_spec, paths)
        if settings.get("metrics"):
            args.append("--metrics")
        args += ["--host", paths.host, "--port", str(paths.port)]
        args += [str(a) for a in cell.engine_spec.get("extra_args", [])]
        return args

    @staticmethod
    def _drafter_args(spec: dict[str, Any], paths: LaunchPaths) -> list[str]:
        args = []
        if spec["kind"] in MODEL_DRAFTER_KINDS:
            args += ["--model-draft", str(paths.drafter_weights)]
        args += ["--spec-type", spec["kind"]]
        if "n_max" in spec and spec["kind"] in N_MAX_FLAGS:
            args += [N_MAX_FLAGS[spec["kind"]], str(spec["n_max"])]
        for key, value in spec.get("settings", {}).items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        return args

    def parse_spec_metrics(self, text: str) -> SpecCounters:
        from ..promtext import counters

        values = counters(text, prefix="llamacpp:")
        per_pos = values.get("spec_decode_num_accepted_tokens_per_pos_total", {})
        return SpecCounters(
            drafts=values.get("spec_decode_num_drafts_total", {}).get(()),
            draft_tokens=values.get("spec_decode_num_draft_tokens_total", {}).get(()),
            accepted_tokens=values.get("spec_decode_num_accepted_tokens_total", {}).get(()),
            accepted_per_pos=[per_pos[k] for k in sorted(per_pos, key=lambda k: int(k[0][1]))],
        )
