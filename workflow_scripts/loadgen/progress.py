"""The load's live progress for whoever watches: a bar on a terminal, labelled lines for the
terminal that runs snakemake, nothing in a log."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable

from ..terminal import Throttle, say
from .records import ERROR, RequestRecord


class Progress:
    """Live progress: a one-line bar on a terminal (silent otherwise, e.g. CI logs), or, with a
    `label`, a plain line every `every_s` seconds for the terminal that runs snakemake (the rule
    script's own stderr goes to its log). `poll`, when set, reads the counts kept elsewhere (by
    load processes) instead of `update`'s."""

    def __init__(
        self, total: int, enabled: bool | None = None, label: str | None = None, every_s=5.0
    ) -> None:
        self.total = total
        self.label = label
        self.enabled = label is not None or (sys.stderr.isatty() if enabled is None else enabled)
        self.throttle = Throttle(every_s)
        self.done = self.errors = self.tokens = 0
        self.start = time.perf_counter()
        self.poll: Callable[[], tuple[int, int, int]] | None = None

    def update(self, record: RequestRecord) -> None:
        self.done += 1
        self.errors += record.status == ERROR
        self.tokens += record.completion_tokens or 0

    async def run(self) -> None:
        while self.enabled:
            if self.label is None or self.throttle.ready():
                self.draw()
            await asyncio.sleep(0.5)

    def draw(self, end: str = "") -> None:
        if not self.enabled:
            return
        if self.poll is not None:
            self.done, self.errors, self.tokens = self.poll()
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        if self.label is not None:
            say(
                f"{self.label}: {self.done}/{self.total} requests, {self.errors} errors, "
                f"{self.tokens / elapsed:.1f} decode tok/s so far"
            )
            return
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
            f"errors {self.errors}  {self.tokens / elapsed:8.1f} tok/s{end}"
        )
        sys.stderr.flush()
