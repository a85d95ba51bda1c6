"""What every weights step shares: its error, the inputs the DAG hands it, a spec's digest, a
file's manifest entry (size, sha256) and the free-space check before a download or derivation."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..atomic import canonical_json
from ..registry_fetch import sha256_file


class WeightsError(RuntimeError):
    """Weights could not be fetched or did not verify."""


@dataclass(frozen=True)
class StepInputs:
    """What the DAG made before this weights step: the manifest of the entry it is derived from,
    and the stamp of the engine whose tools (llama-quantize, the converter) it runs."""

    source_manifest: Path | None = None
    engine_stamp: Path | None = None


NO_INPUTS = StepInputs()


def spec_digest(spec: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()[:16]


def file_entry(path: Path, name: str | None = None) -> dict[str, Any]:
    return {
        "path": str(path),
        "name": name or path.name,
        "size": path.stat().st_size,
        "sha256": sha256_file(path),
    }


def check_free_space(folder: Path, needed_bytes: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed_bytes * 1.05:
        raise WeightsError(
            f"not enough disk space in {folder}: {free / 2**30:.2f} GiB free, "
            f"about {needed_bytes / 2**30:.2f} GiB needed"
        )
