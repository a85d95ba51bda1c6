"""Arrival traces in published formats, read and validated, then cut to a window and scaled:
Mooncake's JSONL (`timestamp` in ms, `input_length`, `output_length`, `hash_ids`: one id per
512-token block) and BurstGPT's CSV (`Timestamp` in s, `Request tokens`, `Response tokens`; its
other columns are ignored). Anything malformed is refused naming the file and the line, and only
a regular file of at most MAX_TRACE_BYTES is read (a FIFO or a device never blocks or floods).
The requests are filled with real text in `trace_text`."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMATS = ("mooncake", "burstgpt")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
MOONCAKE_BLOCK_TOKENS = 512  # the tokens one of Mooncake's hash_ids stands for
# The largest trace file read: a million BurstGPT rows are about 45 MB, a published Mooncake trace
# a few MB. Read whole, then parsed: a file past it is refused before a byte is read.
MAX_TRACE_BYTES = 256 * 1024 * 1024


class TraceError(ValueError):
    """A trace file that cannot be replayed as written."""


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: its 1-based line in the file, its time in seconds (on the
    trace's own clock as read; from the window's start once `window` has placed it), its
    lengths in tokens, and the prefix blocks it shares with others (empty: none known)."""

    line: int
    at_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()


def _where(path: Path, line: int) -> str:
    return f"{path}:{line}"


def _length(value: Any, name: str, where: str, least: int, cell: bool = False) -> int:
    """A whole number of tokens, at least `least`; a CSV `cell`'s text is read as one (ASCII
    digits only: `4e1` or `40.0` is refused, quoted as written)."""
    if cell and isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{where}: `{name}` must be a whole number of tokens, got {value!r}")
    if value < least:
        raise TraceError(f"{where}: `{name}` must be at least {least}, got {value}")
    return value


def _time(value: Any, name: str, where: str, cell: bool = False) -> float:
    if cell and isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            value = None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TraceError(f"{where}: `{name}` must be a number, got {value!r}")
    if value < 0:
        raise TraceError(f"{where}: `{name}` is negative ({value})")
    return float(value)


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _regular(path: Path, mode: int, size: int) -> None:
    if not stat.S_ISREG(mode):
        raise TraceError(f"{path}: {_kind_of(mode)}, not a regular file")
    if size > MAX_TRACE_BYTES:
        raise TraceError(
            f"{path}: {size} bytes, over the {MAX_TRACE_BYTES // 2**20} MiB a trace may have "
            "(cut it to the window you replay)"
        )


def trace_file_text(path: str | Path) -> str:
    """The file's text: refused when it is missing, not a regular file (a directory, a named
    pipe, a device: checked before it is opened, and again on the opened file, which is opened
    without blocking), over MAX_TRACE_BYTES, or not UTF-8 (naming the line of the first bad
    byte)."""
    path = Path(path)
    try:
        _regular(path, (found := path.stat()).st_mode, found.st_size)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(handle.fileno())  # the path may have been swapped since the stat
        _regular(path, opened.st_mode, opened.st_size)
        data = handle.read(MAX_TRACE_BYTES + 1)
    _regular(path, stat.S_IFREG, len(data))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TraceError(
            f"{_where(path, line)}: not UTF-8 text (byte 0x{data[exc.start]:02x})"
        ) from None


def _mooncake(path: Path, text: str) -> list[TraceRequest]:
    out = []
    for line, row_text in enumerate(text.split("\n"), start=1):  # as trace_file_text counts
        if not row_text.strip():
            continue
        where = _where(path, line)
        try:
            row = json.loads(row_text)
        except ValueError as exc:
            raise TraceError(f"{where}: not JSON ({exc})") from exc
        if not isinstance(row, dict):
            raise TraceError(f"{where}: expected a JSON object")
        missing = [key for key in MOONCAKE_KEYS if key not in row]
        if missing:
            raise TraceError(f"{where}: missing key(s) {', '.join(missing)}")
        ids = row["hash_ids"]
        if not isinstance(ids, list) or any(
            isinstance(i, bool) or not isinstance(i, int) for i in ids
        ):
            raise TraceError(f"{where}: `hash_ids` must be a list of whole numbers")
        at_s = _time(row["timestamp"], "timestamp", where) / 1000.0
        inputs = _length(row["input_length"], "input_length", where, 1)
        outputs = _length(row["output_length"], "output_length", where, 1)
        out.append(TraceRequest(line, at_s, inputs, outputs, tuple(ids)))
    return out


def _burstgpt(path: Path, text: str) -> list[TraceRequest]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        return _burstgpt_rows(path, reader)
    except csv.Error as exc:  # a field past csv's limit, say
        raise TraceError(f"{_where(path, reader.line_num)}: not CSV ({exc})") from None


def _burstgpt_rows(path: Path, reader: Any) -> list[TraceRequest]:
    header = next(reader, [])
    missing = [c for c in BURSTGPT_COLUMNS if c not in header]
    if missing:
        raise TraceError(f"{_where(path, 1)}: missing column(s) {', '.join(missing)}")
    columns = tuple(header.index(c) for c in BURSTGPT_COLUMNS)
    out = []
    for row in reader:
        if not row:
            continue  # a blank line
        request = _plain_burstgpt(reader.line_num, row, columns)
        if request is None:  # the same request, by the checks that say why one is refused
            at, inputs, outputs = (row[i] if i < len(row) else None for i in columns)
            where = _where(path, reader.line_num)
            request = TraceRequest(
                reader.line_num,
                _time(at, "Timestamp", where, cell=True),
                _length(inputs, "Request tokens", where, 1, cell=True),
                # BurstGPT marks a failed request with 0 response tokens: nothing to replay
                _length(outputs, "Response tokens", where, 1, cell=True),
            )
        out.append(request)
    return out


def _plain_burstgpt(line: int, row: list[str], columns: tuple[int, ...]) -> TraceRequest | None:
    """A row in the plain form a well-formed one has (a time, two counts of ASCII digits, not
    0) as its request, with no message made (a plan reads a million rows); None otherwise."""
    at, inputs, outputs = columns
    if len(row) <= max(columns):
        return None
    inputs, outputs = row[inputs], row[outputs]
    if not (inputs.isdigit() and outputs.isdigit() and inputs.isascii() and outputs.isascii()):
        return None
    try:
        at_s = float(row[at])
    except ValueError:
        return None
    request = TraceRequest(line, at_s, int(inputs), int(outputs))
    plain = 0 <= at_s < math.inf and request.input_length and request.output_length
    return request if plain else None


def read_trace(path: str | Path, fmt: str) -> list[TraceRequest]:
    """Every request of the file, in its order; refused when the file cannot be read as text
    (`trace_file_text`), a key or column is missing, a length is not a whole number (or below 1), a
    time is negative or earlier than the line's before it, or the file holds no request."""
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r} (expected one of {', '.join(FORMATS)})")
    path = Path(path)
    text = trace_file_text(path)
    requests = _mooncake(path, text) if fmt == "mooncake" else _burstgpt(path, text)
    for before, after in zip(requests, requests[1:], strict=False):
        if after.at_s < before.at_s:
            raise TraceError(
                f"{_where(path, after.line)}: time goes back ({after.at_s:g} s after "
                f"{before.at_s:g} s on line {before.line}): a trace must be sorted by time"
            )
    if not requests:
        raise TraceError(f"{path}: no request in the trace")
    return requests


def window(
    requests: list[TraceRequest],
    start_s: float = 0.0,
    duration_s: float | None = None,
    time_scale: float = 1.0,
    source: Path | None = None,
) -> list[TraceRequest]:
    """The requests at `start_s` <= time < `start_s + duration_s` (None: to the end) on the
    trace's own clock, each placed at (time - start_s) x `time_scale` from the run's start:
    the schedule. Refused when the window holds no request, or a time placed so is no finite
    number (a huge `time_scale` times a huge time); `source`: the file, for the messages."""
    if start_s < 0 or (duration_s is not None and duration_s <= 0) or time_scale <= 0:
        raise TraceError(
            f"a window needs start_s >= 0, duration_s > 0 and time_scale > 0 "
            f"(got {start_s}, {duration_s}, {time_scale})"
        )
    end = math.inf if duration_s is None else start_s + duration_s
    kept = [
        TraceRequest(
            r.line, (r.at_s - start_s) * time_scale, r.input_length, r.output_length, r.hash_ids
        )
        for r in requests
        if start_s <= r.at_s < end
    ]
    if not kept:
        of = f"{source}: no request" if source else "no request of the trace"
        raise TraceError(f"{of} lies in the window [{start_s:g} s, {end:g} s)")
    for r in kept:
        if not math.isfinite(r.at_s):
            raise TraceError(
                f"{_where(source, r.line) if source else f'line {r.line}'}: its time x "
                f"time_scale {time_scale:g} is past any finite number of seconds"
            )
    return kept
