"""What a cell leaves behind: the host and weights it ran on, and its files (requests.jsonl,
server.log, memory.csv, then metrics.json last: a metrics.json means the cell is whole), or a
blocked cell's stub of them; and a metrics.json cut short told (`cut_short`) and made a failed
record (`write_unreadable`)."""

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


def unparsable(path: str | Path) -> str | None:
    """Why a JSON file that exists does not parse as an object (cut short, damaged); None when
    it parses or is not there."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return None if isinstance(data, dict) else "not a JSON object"


# How every metrics.json ends (atomic.write_json: two-space indent, so the only line that is a
# bare `}` is the top-level object's last).
WHOLE_END = b"\n}\n"


def cut_short(metrics: str | Path) -> str | None:
    """Why a cell's metrics.json does not parse (None: whole, or not there). One that ends as
    write_json ends it is whole: the Snakefile asks this of every cell at parse time, and 3
    bytes a cell cost a 10,000-point matrix about 0.2 s where parsing each cost 1.4-3 s."""
    try:
        with open(metrics, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - len(WHOLE_END)))
            if handle.read() == WHOLE_END:
                return None
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    return unparsable(metrics)


def write_unreadable(cell: Cell, out: Path, why: str) -> CellMetrics:
    """A cell whose metrics.json does not parse (cut short): a whole failed record in its place,
    the rest of its folder left as it is, so its card, the tables and the figures read a failed
    cell with the reason, and its failure counter (bumped beside it) measures it again."""
    result: CellMetrics = {
        **identity(cell),
        "status": Status.FAILED,
        "reason": why,
        "mem": None,
        "spec": None,
    }
    write_json(out / "metrics.json", result)
    return result
