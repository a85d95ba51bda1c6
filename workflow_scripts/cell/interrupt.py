"""SIGTERM to `snakemake` stops the run now, not after the running cells.

Snakemake's own SIGTERM handler only stops scheduling and waits for the running jobs: a cell
would keep its server under load up to its time cap. Forwarded to the job processes, the signal
reaches each cell's `sigterm_raises`, which tears the server down and writes no result; the job
fails, Snakemake removes its outputs and exits, and the next run redoes exactly those cells.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

import psutil


def forward_sigterm_to_jobs() -> bool:
    """In the Snakemake process (an `onstart` hook, after the scheduler set its handler): on
    SIGTERM, send SIGTERM to every process below it (the running jobs, and what they started,
    e.g. a job wrapped in a shell by `--sdm conda`), then let Snakemake's own handler run.
    Returns False where a handler cannot be set (not the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)
    owner = os.getpid()
    forwarded = False

    def handler(signum, frame):
        nonlocal forwarded
        if not forwarded and os.getpid() == owner:  # once; never from a forked child
            forwarded = True
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(owner).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        child.send_signal(signal.SIGTERM)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    return True
