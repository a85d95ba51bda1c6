"""What a cell leaves behind: the host and weights it ran on, and its files (requests.jsonl,
server.log, memory.csv, then metrics.json last: a metrics.json means the cell is whole), or a
blocked cell's stub of them."""

from __future__ import annotations

import json
import os
import platform
import socket
from pathlib import Path
from typing import Any

from ..atomic import atomic_open, write_json, write_text
from ..process.memory import write_memory_csv
from ..vocabulary import Cell, CellMetrics, Status, identity


def host_info(gpu_devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "kernel": platform.release(),
        "gpus": gpu_devices or [],
        "driver": (gpu_devices or [{}])[0].get("driver") if gpu_devices else None,
    }


def weights_provenance(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": manifest.get("source"),
        "spec_digest": manifest.get("spec_digest"),
        "files": [{k: f[k] for k in ("name", "size", "sha256")} for f in manifest.get("files", [])],
        "resolved": manifest.get("resolved"),
    }


def write_outputs(out: Path, result: CellMetrics, records: list) -> None:
    with atomic_open(out / "requests.jsonl") as handle:
        for record in records:
            handle.write(json.dumps(record.to_dict(), separators=(",", ":")) + "\n")
    if not (out / "server.log").exists():
        write_text(out / "server.log", "(the server was never started)\n")
    if not (out / "memory.csv").exists():
        write_memory_csv(str(out / "memory.csv"), [])
    write_json(out / "metrics.json", result)


def write_blocked(cell: Cell, out: Path) -> CellMetrics:
    """A cell the config marks blocked: listed with its reason, never run."""
    result: CellMetrics = {
        **identity(cell),
        "status": Status.BLOCKED,
        "reason": cell.blocked,
        "mem": None,
        "spec": None,
    }
    write_text(out / "server.log", f"(blocked: {cell.blocked})\n")
    write_text(out / "requests.jsonl", "")
    write_memory_csv(str(out / "memory.csv"), [])
    write_json(out / "metrics.json", result)
    return result
