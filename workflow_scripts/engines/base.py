"""What every engine adapter answers: argv for a cell, readiness, metrics, version."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class LaunchPaths:
    """Where a cell's files are, as the server sees them (host paths, or mounts in a container)."""

    weights: str
    drafter_weights: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080


@dataclass
class SpecCounters:
    """Speculative-decoding counters read from an engine at one moment."""

    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_pos: list[float] = field(default_factory=list)
    accept_length: float | None = None  # engines that only report a mean (SGLang)


class EngineAdapter:
    """Base class; one subclass per engine kind, registered by `kind`."""

    kind: ClassVar[str] = ""
    drafter_kinds: ClassVar[frozenset[str]] = frozenset()
    launch_modes: ClassVar[frozenset[str]] = frozenset({"native", "docker"})
    health_path: ClassVar[str] = "/health"
    metrics_path: ClassVar[str | None] = "/metrics"

    def check_engine(self, name: str, spec: dict[str, Any]) -> None:
        from ..matrix import ConfigError

        where = f"engines.{name}"
        if spec["launch"] not in self.launch_modes:
            raise ConfigError(
                f"config key '{where}.launch': '{spec['launch']}' is not a launch mode of "
                f"{self.kind} (choose from {', '.join(sorted(self.launch_modes))})"
            )
        if spec["launch"] == "native" and not spec.get("binary"):
            raise ConfigError(f"config key '{where}.binary': native launch needs a binary")
        if spec["launch"] == "docker" and not spec.get("docker"):
            raise ConfigError(f"config key '{where}.docker': docker launch needs docker.image")

    def check_drafter(self, name: str, spec: dict[str, Any], where: str) -> None:
        from ..matrix import ConfigError

        if spec["kind"] not in self.drafter_kinds:
            raise ConfigError(
                f"config key '{where}': drafter '{name}' has kind '{spec['kind']}', which "
                f"{self.kind} does not support (supported: {', '.join(sorted(self.drafter_kinds))})"
            )

    def server_args(self, cell, paths: LaunchPaths) -> list[str]:
        """Engine arguments after the program (binary, `python -m ...` or docker image)."""
        raise NotImplementedError

    def served_model(self, cell, paths: LaunchPaths) -> str | None:
        """The `model` name requests must carry; None when the server ignores it."""
        return None

    def parse_spec_metrics(self, text: str) -> SpecCounters:
        return SpecCounters()
