"""A replayed trace checked at plan time (a `trace` dataset, loadgen/traces.py), by the trace
reader's own rules, so that `snakemake -n` and `plan` refuse what a cell would fail on after its
server started: the file read as a trace (a regular UTF-8 file within its size cap, every line
well formed), its window holding the prompts each point of the workload replays, their schedule
due within the time cap, and each request's lengths within what every cell replaying it can hold.

Each file is read once per process however many workloads and cells name it (kept by path,
format, size and modification time), and each window's longest requests are found once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engines import adapter_for
from ..loadgen.traces import TraceError, TraceRequest, read_trace, window
from ..vocabulary import Cell, ConfigError
from . import probes, sweeps

# A replay with no `max_seconds` whose schedule runs longer than this is refused: a run of days
# is a mistake far more often than a plan (`time_scale: 1e9`), and one that is meant says so by
# setting max_seconds.
MAX_UNCAPPED_SCHEDULE_S = 24 * 3600.0


@dataclass(frozen=True)
class Window:
    """A workload's window of its trace, scheduled (loadgen.traces.window), and its requests
    that need more tokens (input + output lengths) than every one before them, with their
    positions: the first request past a context is among these."""

    path: Path
    requests: list[TraceRequest]
    longest: list[tuple[int, TraceRequest]]
    start_s: float
    end_s: float
    time_scale: float

    def first_over(self, tokens: int, count: int) -> TraceRequest | None:
        """The first of the first `count` requests whose lengths add up past `tokens`."""
        for position, request in self.longest:
            if position >= count:
                return None
            if request.input_length + request.output_length > tokens:
                return request
        return None


@dataclass
class _Read:
    """A trace file as read, the file's identity when it was (inode, size, modification time),
    and its windows made so far."""

    stamp: tuple[int, int, int]
    requests: list[TraceRequest]
    windows: dict[tuple[str, float, float | None, float], Window]


_FILES: dict[tuple[str, str], _Read] = {}


def _read(path: Path, fmt: str) -> _Read:
    """The trace's requests, read again only when the file changed."""
    try:
        found = os.stat(path)
    except OSError:  # refused by read_trace, naming the file
        return _Read((0, 0, 0), read_trace(path, fmt), {})
    key = (str(path.resolve()), fmt)
    stamp = (found.st_ino, found.st_size, found.st_mtime_ns)
    if key not in _FILES or _FILES[key].stamp != stamp:
        _FILES[key] = _Read(stamp, read_trace(path, fmt), {})
    return _FILES[key]


def trace_window(name: str, workload: Mapping[str, Any]) -> Window | None:
    """The workload's window of its trace (None: the workload replays none); refused naming
    `workloads.<name>.dataset.path` and the file (and line) when the file cannot be replayed, or
    `workloads.<name>.dataset` when the window holds no request."""
    dataset = workload.get("dataset", {})
    if dataset.get("kind") != "trace":
        return None
    where = f"workloads.{name}.dataset"
    path = Path(dataset["path"])
    try:
        read = _read(path, dataset["format"])
    except TraceError as exc:
        raise ConfigError(f"config key '{where}.path': {exc}") from None
    start_s, duration_s = float(dataset.get("start_s", 0.0)), dataset.get("duration_s")
    time_scale = float(dataset.get("time_scale", 1.0))
    cut = (str(path), start_s, duration_s, time_scale)  # the path as written: messages quote it
    if cut not in read.windows:
        try:
            kept = window(read.requests, start_s, duration_s, time_scale, path)
        except TraceError as exc:
            first, last = read.requests[0].at_s, read.requests[-1].at_s
            raise ConfigError(
                f"config key '{where}': {exc}; its requests lie in [{first:g} s, {last:g} s]"
            ) from None
        end_s = float("inf") if duration_s is None else start_s + duration_s
        read.windows[cut] = Window(path, kept, _record_breakers(kept), start_s, end_s, time_scale)
    return read.windows[cut]


def _record_breakers(requests: list[TraceRequest]) -> list[tuple[int, TraceRequest]]:
    out: list[tuple[int, TraceRequest]] = []
    most = 0
    for position, request in enumerate(requests):
        if request.input_length + request.output_length > most:
            most = request.input_length + request.output_length
            out.append((position, request))
    return out


def prompt_counts(name: str, workload: Mapping[str, Any]) -> dict[int, str]:
    """Each number of prompts a cell of the workload replays (a search's: its first and last
    load's first run) -> the key that sets it."""
    scaled = "num_prompts_per_concurrency" in workload
    key = "num_prompts_per_concurrency" if scaled else "num_prompts"
    if probes.searching(workload):
        spec = workload["search"]
        entries = [sweeps.point_entry(workload, spec["over"], spec[end]) for end in ("min", "max")]
    else:
        entries = [point.entry for point in sweeps.points(name, workload)]
    return {entry["num_prompts"]: key for entry in entries}


def check_trace_workload(name: str, workload: Mapping[str, Any]) -> None:
    """A `trace` workload's file and window (`trace_window`), enough requests in the window for
    every point, and their schedule due before `max_seconds` (absent: within
    MAX_UNCAPPED_SCHEDULE_S): a request due after the cap is never sent."""
    found = trace_window(name, workload)
    if found is None:
        return
    counts = prompt_counts(name, workload)
    most = max(counts)
    where = f"workloads.{name}"
    cut = f"{found.path}'s window [{found.start_s:g} s, {found.end_s:g} s)"
    if most > len(found.requests):
        raise ConfigError(
            f"config key '{where}.{counts[most]}': {most} prompts, and {cut} holds "
            f"{len(found.requests)} requests"
        )
    last_s = found.requests[most - 1].at_s
    cap_s = workload.get("max_seconds")
    schedule = (
        f"the schedule of the first {most} requests of {cut}, times time_scale "
        f"{found.time_scale:g}, runs {last_s:g} s (its last due at line "
        f"{found.requests[most - 1].line})"
    )
    if cap_s is not None and last_s >= cap_s:
        raise ConfigError(
            f"config key '{where}.max_seconds': {cap_s:g} s, and {schedule}: what is due after "
            "the cap is never sent; raise max_seconds, or replay fewer requests, a shorter "
            "window or a smaller time_scale"
        )
    if cap_s is None and last_s > MAX_UNCAPPED_SCHEDULE_S:
        raise ConfigError(
            f"config key '{where}.max_seconds': absent, and {schedule}, past the "
            f"{MAX_UNCAPPED_SCHEDULE_S:g} s a replay may run without a cap; set max_seconds "
            "to replay it, or replay fewer requests, a shorter window or a smaller time_scale"
        )


def context_limits(cell: Cell) -> list[tuple[int, str]]:
    """What bounds one request's prompt + answer in the cell, in tokens, and whose it is: the
    model's `context_window`, and its engine's context setting (the adapter's `context_setting`,
    a whole number; not where the context guard sizes it at launch)."""
    out = []
    window_tokens = cell.model_info.get("context_window")
    if isinstance(window_tokens, int):
        out.append((window_tokens, f"model '{cell.model}' (context_window)"))
    adapter = adapter_for(cell.engine_kind)
    setting = adapter.context_setting
    value = cell.engine_spec.get("settings", {}).get(setting) if setting else None
    sized = adapter.splits_context and cell.run.context_guard == "size"
    if isinstance(value, int) and not isinstance(value, bool) and value > 0 and not sized:
        out.append((value, f"engine '{cell.engine}' ({setting})"))
    return out


def check_trace_context(workloads: Mapping[str, Mapping[str, Any]], cell: Cell, where: str) -> None:
    """Each request a cell of a trace workload may replay fits what bounds the cell's context
    (`context_limits`): refused naming the line, as no server could hold it (the context guard
    would drop it at run time). Compared: the trace's input_length (what the prompt is fitted to
    in the engine's own tokens, template included; an engine that cannot count sends the
    estimate) plus its output_length (the request's max_tokens)."""
    workload = workloads[cell.workload]
    found = trace_window(cell.workload, workload)
    if found is None or cell.blocked:
        return
    most = max(prompt_counts(cell.workload, workload))
    for tokens, whose in context_limits(cell):
        request = found.first_over(tokens, most)
        if request is not None:
            raise ConfigError(
                f"config key 'workloads.{cell.workload}.dataset.path': "
                f"{found.path}:{request.line}: input_length {request.input_length} + "
                f"output_length {request.output_length} tokens, past the {tokens}-token "
                f"context of {whose}, which cell {cell.id} ({where}) replays it on"
            )
