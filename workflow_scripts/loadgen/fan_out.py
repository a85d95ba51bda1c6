"""The measured part spread over spawned load processes, for loads one Python process cannot
keep up with: one shared prompt counter (still one closed loop over the prompts), one start
time on the shared monotonic clock, one deadline, the records merged as if one process ran
them.

A load process needs nothing of its parent's `__main__`, and must not re-run it: under
Snakemake's `script:` the parent's `__main__.__file__` is the rule's entry script, which runs
only below Snakemake's preamble (in a child it raised NameError, and every fanned-out load
ended in a bare EOFError)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
import sys
import traceback
import types
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait

from ..process.server import die_with_parent
from .closed_loop import measured
from .prompts import Prompt
from .records import ERROR, RequestRecord
from .settings import LoadSettings


def split_workers(concurrency: int, processes: int) -> list[int]:
    """Workers per process: as even as possible, none empty."""
    processes = max(1, min(processes, concurrency))
    base, extra = divmod(concurrency, processes)
    return [base + (i < extra) for i in range(processes)]


def _child(pipe, spec: LoadSettings, prompts: list[Prompt], counter, tally, workers: int) -> None:
    """One worker process: wait for the shared start time, run its workers, send the records.
    It dies with the client (even a SIGKILLed one): no stream outlives the run."""
    die_with_parent()
    if os.getppid() != multiprocessing.parent_process().pid:
        return  # the client died before the line above took effect
    try:
        pipe.send("ready")
        t0 = pipe.recv()
        if t0 is None:
            return

        def next_position() -> int | None:
            with counter.get_lock():
                position = counter.value
                if position >= len(prompts):
                    return None
                counter.value = position + 1
            return position

        def on_record(record: RequestRecord) -> None:
            with tally.get_lock():
                tally[0] += 1
                tally[1] += record.status == ERROR
                tally[2] += record.completion_tokens or 0

        records, capped = asyncio.run(
            measured(spec, prompts, t0, workers, next_position, on_record)
        )
        pipe.send(("ok", records, capped))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):
        pass  # interrupted, or the parent gave up before the start: nothing to report
    except BaseException:
        with contextlib.suppress(OSError):
            pipe.send(("error", traceback.format_exc(), False))
    finally:
        pipe.close()


class LoadProcessDied(RuntimeError):
    """A load process ended without sending what its parent waited for."""


@contextlib.contextmanager
def parent_main_hidden() -> Iterator[None]:
    """While load processes start: a blank `__main__`, so spawn's preparation names no main
    module or script for a child to re-run (what it runs, `_child`, is imported by name)."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def how_it_ended(exitcode: int | None) -> str:
    """A process's end in words: its exit code, or the signal that killed it."""
    if exitcode is None:
        return "still running, its pipe closed"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class FanOut:
    """The measured part from `processes` spawned processes: they start (and import) while this
    one warms up, wait for the start time `run` sends, and are reaped by `close`."""

    def __init__(self, spec: LoadSettings, prompts: list[Prompt], processes: int) -> None:
        self.settings, self.prompts, self.processes = spec, prompts, processes
        self.ctx = multiprocessing.get_context("spawn")
        self.counter = self.ctx.Value("q", 0)
        self.tally = self.ctx.Array("q", 3)  # done, errors, completion tokens: for the progress
        self.procs: list = []
        self.pipes: list = []
        self.answers: list = []

    def poll(self) -> tuple[int, int, int]:
        return tuple(self.tally[:])

    def start(self) -> None:
        with parent_main_hidden():
            for workers in split_workers(self.settings.concurrency, self.processes):
                mine, theirs = self.ctx.Pipe()
                proc = self.ctx.Process(
                    target=_child,
                    args=(theirs, self.settings, self.prompts, self.counter, self.tally, workers),
                    daemon=True,
                )
                proc.start()
                theirs.close()
                self.procs.append(proc)
                self.pipes.append(mine)

    async def ready(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._receive, "while starting, before it was ready")

    async def run(self, t0: float, on_record: Callable[[RequestRecord], None]) -> None:
        """Send the start time; each process counts its records in the shared tally instead."""
        for i, pipe in enumerate(self.pipes):
            try:
                pipe.send(t0)
            except OSError:  # its end of the pipe is gone: so is the process
                raise self._died(i, "before the start time reached it") from None
        loop = asyncio.get_running_loop()
        self.answers = await loop.run_in_executor(
            None, self._receive, "during the load, before sending its records"
        )

    def _receive(self, when: str) -> list:
        """One message from each process, in order; the first process to end without its
        message raises LoadProcessDied at once, naming it and how it ended (the others are
        ended by `close`)."""
        answers: dict[int, object] = {}
        while len(answers) < len(self.pipes):
            pending = [i for i in range(len(self.pipes)) if i not in answers]
            ready = wait(
                [self.pipes[i] for i in pending] + [self.procs[i].sentinel for i in pending]
            )
            for i in pending:
                pipe, proc = self.pipes[i], self.procs[i]
                if pipe.poll():
                    try:
                        answers[i] = pipe.recv()
                        continue
                    except EOFError:
                        pass
                elif proc.sentinel not in ready:
                    continue
                raise self._died(i, when)
        return [answers[i] for i in range(len(self.pipes))]

    def _died(self, i: int, when: str) -> LoadProcessDied:
        proc = self.procs[i]
        proc.join(timeout=5)
        return LoadProcessDied(
            f"load process {i + 1} of {len(self.procs)} (pid {proc.pid}) ended {when}:"
            f" {how_it_ended(proc.exitcode)}"
        )

    def close(self) -> None:
        """Reap the processes. A run that did not finish (an error, Ctrl-C, SIGTERM) ends them
        at once: they would keep streaming, connections open, until the deadline. The pipes
        close last, so a thread still waiting on one sees the end of its process."""
        if len(self.answers) < len(self.procs):
            for proc in self.procs:
                proc.terminate()
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for pipe in self.pipes:
            pipe.close()

    def outcome(self) -> tuple[list[RequestRecord], bool]:
        """The processes' records merged, or the first failure's traceback raised."""
        records: list[RequestRecord] = []
        capped = False
        for kind, payload, child_capped in self.answers:
            if kind == "error":
                raise RuntimeError(f"a load process failed:\n{payload}")
            records += payload
            capped = capped or child_capped
        return records, capped
