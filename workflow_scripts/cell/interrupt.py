"""SIGTERM to `snakemake` stops the run now, not after the running cells.

Snakemake's own SIGTERM handler only stops scheduling and waits for the running jobs: a cell
would keep its server under load up to its time cap. Forwarded to the job processes, the signal
reaches each cell's `sigterm_raises`, which tears the server down and writes no result; the job
fails, Snakemake removes its outputs and exits, and the next run redoes exactly those cells.

SIGTERM must also end a run (or a dry run) that is still planning: Snakemake's handler takes the
scheduler's lock, which the scheduler itself holds while it finishes jobs (for a dry run of
thousands of points, most of its last seconds), so a SIGTERM landing there waited for ever on a
lock its own thread held (measured: a 1000-point `snakemake -n` hung; faulthandler showed the
main thread in `_finish_jobs` under the lock). `sigterm_never_waits_on_itself` makes that case
stop the run as Ctrl-C does.
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


def sigterm_never_waits_on_itself() -> bool:
    """At parse time, before Snakemake builds its scheduler: its SIGTERM handler stops a dry run
    at once, and a run whose scheduler's lock is taken (by the very thread the signal
    interrupted, most likely), as Ctrl-C does (KeyboardInterrupt: the scheduler cancels its jobs
    and returns). It never waits: a handler that waits is entered again by the next SIGTERM, and
    the one that waited on the lock its own thread held never returned. A run whose lock is free
    keeps Snakemake's graceful stop (forward_sigterm_to_jobs has ended the jobs' servers).
    Returns False where Snakemake's scheduler is not found (another version: nothing changed)."""
    try:
        from snakemake.scheduling.job_scheduler import JobScheduler
    except ImportError:
        return False
    original = getattr(JobScheduler, "exit_gracefully", None)
    if original is None:
        return False
    if getattr(original, "never_waits_on_itself", False):
        return True

    def exit_gracefully(self, *args):
        lock = getattr(self, "_lock", None)
        if getattr(getattr(self, "workflow", None), "dryrun", False):
            raise KeyboardInterrupt("SIGTERM: a dry run has nothing to finish")
        if lock is not None:
            if not lock.acquire(blocking=False):
                raise KeyboardInterrupt("SIGTERM while the scheduler held its lock")
            lock.release()
        return original(self, *args)

    exit_gracefully.never_waits_on_itself = True
    JobScheduler.exit_gracefully = exit_gracefully
    return True
