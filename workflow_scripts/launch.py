"""A cell's server command: the program (built binary, native binary, or a docker run) plus the
adapter's engine arguments."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .engines.base import EngineAdapter, LaunchPaths
from .matrix import Cell


@dataclass(frozen=True)
class ServerCommand:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stop_argv: list[str] | None = None
    served_model: str | None = None


def server_command(
    cell: Cell, adapter: EngineAdapter, engine_info: dict[str, Any], paths: LaunchPaths
) -> ServerCommand:
    spec = cell.engine_spec
    env = {k: str(v) for k, v in spec.get("env", {}).items()}
    launch = spec["launch"]
    if launch in ("build", "native"):
        program = engine_info.get("binary") or spec.get("binary")
        if not program:
            raise ValueError(f"engine '{cell.engine}': no binary to launch")
        argv = [*str(program).split(), *adapter.server_args(cell, paths)]
        return ServerCommand(argv, env, None, adapter.served_model(cell, paths))
    raise ValueError(f"engine '{cell.engine}': launch mode '{launch}' is not supported yet")
