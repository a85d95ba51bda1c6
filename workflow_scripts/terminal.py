"""Progress lines for the person who ran snakemake, and how wide a table for them may be.

Rule scripts send their stderr to the rule's log (`entry.stderr_to_log`), so a long step would
be silent where the user watches. These lines go to the process's original stderr, which
Snakemake passes through to the terminal (or CI log), and are throttled so a log stays short.
"""

from __future__ import annotations

import shutil
import sys
import time


def say(message: str) -> None:
    """One line on the terminal, whatever `sys.stderr` points at now."""
    stream = sys.__stderr__
    if stream is None:
        return
    try:
        stream.write(message.rstrip("\n") + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass  # a closed or broken terminal must never fail a benchmark


class Throttle:
    """Lets a progress line through at most once every `interval_s` (the first one at once)."""

    def __init__(self, interval_s: float = 5.0) -> None:
        self.interval_s = interval_s
        self._last: float | None = None

    def ready(self) -> bool:
        now = time.monotonic()
        if self._last is not None and now - self._last < self.interval_s:
            return False
        self._last = now
        return True


def human_bytes(count: float) -> str:
    """`76.6 MiB`: sizes in powers of 1024, as memory figures are."""
    if count < 1024:
        return f"{count:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        count /= 1024
        if count < 1024 or unit == "GiB":
            break
    return f"{count:.1f} {unit}"


def terminal_width(most: int = 80, least: int = 40) -> int:
    """The terminal's columns (`COLUMNS` first, as `shutil.get_terminal_size` reads them), at
    most `most`: a table reads the same in a wide terminal and in a CI log (no terminal: `most`).
    Never below `least`, where nothing useful fits."""
    return max(least, min(most, shutil.get_terminal_size((most, 24)).columns))
