"""Per-cell failure counters: a failed cell's rule param changes, so the next run retries it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..atomic import write_json, write_text
from ..vocabulary import Status


def failure_count(failures_dir: str | Path, cell_id: str) -> int:
    path = Path(failures_dir) / f"{cell_id}.count"
    try:
        return int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def failure_counts(failures_dir: str | Path) -> dict[str, int]:
    """Every key's failure count, read in one listing: the Snakefile takes them at parse time
    for its jobs' params (most cells of a large matrix have no counter, and a failed open for
    each would cost 0.35 % of a 1000-point dry run). A count bumped during a run counts from the
    next."""
    counts = {}
    for path in Path(failures_dir).glob("*.count"):
        count = failure_count(failures_dir, path.stem)
        if count:
            counts[path.stem] = count
    return counts


def bump_failures(failures_dir: str | Path, cell_id: str) -> int:
    count = failure_count(failures_dir, cell_id) + 1
    write_text(Path(failures_dir) / f"{cell_id}.count", f"{count}\n")
    return count


def write_failed_stamp(
    path: str | Path,
    failures_dir: str | Path,
    key: str,
    exc: BaseException,
    details: dict[str, Any] | None = None,
) -> None:
    """A provisioning step (weights, engine) that failed: leave a stamp saying so, so the cells
    that need it fail with this reason instead of stopping the run, and retry next run.
    `details` (e.g. each build variant tried) goes into the stamp beside the reason."""
    bump_failures(failures_dir, key)
    reason = f"{type(exc).__name__}: {exc}"[:4000]
    write_json(path, {**(details or {}), "status": Status.FAILED, "reason": reason})
