"""The results directory as a whole: one run at a time measures into it, and a dry run needs
nothing written there.

Snakemake locks its own working directory only: two working directories whose configs name one
`results_dir` ran cells into it at once and overwrote each other's points. The run that starts
first holds `<results_dir>/.llmbench.lock` (its pid, host, working directory); a second refuses
at its start, naming the holder. A lock whose process is gone is taken over. A dry run takes no
lock (Snakemake calls no `onstart` for it).

The Snakefile writes a few small files while it is parsed (a shared series' launch file, the
goal files); on a read-only results directory they are skipped with a line, so `snakemake -n`
still plans. Stdlib and process.leftovers (the one way a process is told by its pid and start
time) only: the Snakefile imports this when parsed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..process.leftovers import is_running, started

LOCK_NAME = ".llmbench.lock"


class ResultsDirLocked(Exception):
    """Another live run holds the results directory."""


def lock_path(results_dir: str | Path) -> Path:
    return Path(results_dir) / LOCK_NAME


def _holder(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def holder_alive(holder: dict[str, Any]) -> bool:
    """Whether the run a lock names still runs: the same process (pid and start time, as
    process.leftovers tells them) on this host. A lock from another host cannot be checked from
    here: it counts as held."""
    if holder.get("host") != socket.gethostname():
        return True
    pid, ticks = holder.get("pid"), holder.get("start_ticks")
    return isinstance(pid, int) and isinstance(ticks, int) and is_running(pid, ticks)


def holder_text(path: Path, holder: dict[str, Any]) -> str:
    return (
        f"{path} is held by pid {holder.get('pid')} on {holder.get('host')}, working directory "
        f"{holder.get('workdir')}: another run is measuring into this results directory. Wait for "
        f"it to end, or give this run another results_dir; remove {path} only if that run is over"
    )


def acquire_results_lock(results_dir: str | Path, workdir: str | Path | None = None) -> Path:
    """Take the results directory's lock for this process, or raise ResultsDirLocked naming the
    live run that holds it. A lock of a run that is gone (or unreadable) is taken over."""
    path = lock_path(results_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    me = started(pid)
    mine = {
        "pid": pid,
        "host": socket.gethostname(),
        "workdir": str(Path(workdir or os.getcwd()).resolve()),
        "start_ticks": me.start_ticks if me else None,
    }
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(path)
            if holder == {**holder, "pid": pid, "host": mine["host"]} and holder:
                return path  # this process holds it already
            if holder is not None and holder_alive(holder):
                raise ResultsDirLocked(holder_text(path, holder)) from None
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # stale: its run is gone
            continue
        with os.fdopen(fd, "w") as handle:
            json.dump(mine, handle)
        return path
    raise ResultsDirLocked(f"{path}: could not take the lock (another run keeps taking it)")


def release_results_lock(results_dir: str | Path) -> bool:
    """Remove the lock if this process holds it (never another run's); whether it did."""
    path = lock_path(results_dir)
    holder = _holder(path)
    if holder is None or holder.get("pid") != os.getpid():
        return False
    if holder.get("host") != socket.gethostname():
        return False
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return True


def write_at_parse(what: str, write: Callable[..., Any], *args: Any) -> bool:
    """Run a parse-time write; where the results directory is not writable, skip it with a line
    (a dry run needs none of these files; a real run there fails at its first output anyway).
    Returns whether it was written."""
    try:
        write(*args)
    except OSError as error:
        if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        print(f"not written ({what}): {error}; a dry run does not need it", file=sys.stderr)
        return False
    return True
