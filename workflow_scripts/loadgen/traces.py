"""Arrival traces in published formats, read and validated, then cut to a window and scaled:
Mooncake's JSONL (`timestamp` in ms, `input_length`, `output_length`, `hash_ids`: one id per
512-token block) and BurstGPT's CSV (`Timestamp` in s, `Request tokens`, `Response tokens`; its
other columns are ignored). Anything malformed is refused naming the file and the line, and only
a regular file of at most MAX_TRACE_BYTES is read (a FIFO or a device never blocks or floods)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
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


def trace_text(path: str | Path) -> str:
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
    for line, row_text in enumerate(text.split("\n"), start=1):  # as trace_text counts
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
    (`trace_text`), a key or column is missing, a length is not a whole number (or below 1), a
    time is negative or earlier than the line's before it, or the file holds no request."""
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r} (expected one of {', '.join(FORMATS)})")
    path = Path(path)
    text = trace_text(path)
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


# Engine tokens a character of content text is estimated at: measured through llama-server's
# /tokenize with SmolLM2-135M's tokenizer on 40 spans each of 256 and 1024 words (medians:
# ShareGPT's ASCII first human turns 0.25 and 0.27, HumanEval's problems 0.31 and 0.30).
TOKENS_PER_CHAR = {"sharegpt": 0.26, "humaneval": 0.30}
_PIECE = re.compile(r"\S+\s*")


@dataclass(frozen=True)
class TraceSpan:
    """A part of a replayed prompt: `words` whole words of the content from word `start` (read
    cyclically); `block`: the Mooncake block id it is the text (or, last, a head) of; None: a
    fresh span."""

    block: int | None
    start: int
    words: int


@dataclass(frozen=True)
class TraceLayout:
    """How a replayed prompt's text is made, so that it can be fitted in an engine's own tokens
    (cell/trace_fit.py): its `input_length`, its spans in order (all but the last: whole
    blocks; the last: a head of its last block, or a fresh span), and the content's words the
    spans index (one tuple shared by every request; left out of comparisons)."""

    input_length: int
    spans: tuple[TraceSpan, ...]
    content: tuple[str, ...] = field(compare=False, repr=False)

    def text(self, span: TraceSpan, words: int | None = None) -> str:
        """The span's first `words` words (None: its own count), each with its whitespace."""
        n = len(self.content)
        count = span.words if words is None else words
        return "".join(self.content[(span.start + i) % n] for i in range(count))


@dataclass(frozen=True)
class TraceText:
    """A replayed request: the trace's line, its planned send time from the run's start, its
    prompt text, its output length in tokens, and how its text is made."""

    line: int
    at_s: float
    text: str
    output_length: int
    layout: TraceLayout | None = None


class _Content:
    """Real text as whole words (each with the whitespace after it, so pieces joined give the
    text back), read cyclically from a cursor: each call to `take` gives the next fresh span."""

    def __init__(self, texts: list[str], tokens_per_char: float) -> None:
        self.pieces = tuple(_PIECE.findall("\n\n".join(texts)))
        self.chars_per_token = 1.0 / tokens_per_char
        self.total_chars = sum(len(p) for p in self.pieces)
        self.cursor = 0
        self.wrapped = False

    def chars(self, tokens: int) -> float:
        return tokens * self.chars_per_token

    def take(self, tokens: int) -> tuple[int, list[str]]:
        """Whole words from the cursor until they hold `tokens` tokens' worth of characters, and
        the index of the first."""
        start = self.cursor % len(self.pieces)
        want, out, size = self.chars(tokens), [], 0
        while size < want:
            if self.cursor == len(self.pieces):
                self.cursor, self.wrapped = 0, True
            piece = self.pieces[self.cursor]
            self.cursor += 1
            out.append(piece)
            size += len(piece)
        return start, out

    @staticmethod
    def cut(pieces: list[str], chars: float) -> list[str]:
        """The shortest head of `pieces` holding at least `chars` characters."""
        out, size = [], 0
        for piece in pieces:
            if size >= chars:
                break
            out.append(piece)
            size += len(piece)
        return out


def trace_texts(
    requests: list[TraceRequest], texts: list[str], tokens_per_char: float, source: Path
) -> tuple[list[TraceText], str]:
    """Each request's prompt from the content `texts` (real text, about `tokens_per_char` engine
    tokens a character), and a note saying how. A request with `hash_ids` is its blocks' texts
    in order: a block is MOONCAKE_BLOCK_TOKENS tokens of text fixed by its id (the next fresh
    span of the content when the id first appears), its last block cut to the tokens left, so
    requests sharing blocks share their text. A request without is a fresh span of its
    `input_length`. Refused, naming the line, when the request needs more text than the
    content holds, or its `hash_ids` do not cover its `input_length` block by block."""
    content = _Content(texts, tokens_per_char)
    blocks: dict[int, tuple[int, list[str]]] = {}
    out = []
    for r in requests:
        where = _where(source, r.line)
        if content.chars(r.input_length) > content.total_chars:
            raise TraceError(
                f"{where}: input_length {r.input_length} needs about "
                f"{content.chars(r.input_length):.0f} characters of content text, which holds "
                f"{content.total_chars}"
            )
        if not r.hash_ids:
            start, pieces = content.take(r.input_length)
            spans = [TraceSpan(None, start, len(pieces))]
        else:
            full = MOONCAKE_BLOCK_TOKENS * (len(r.hash_ids) - 1)
            if not 0 < r.input_length - full <= MOONCAKE_BLOCK_TOKENS:
                raise TraceError(
                    f"{where}: {len(r.hash_ids)} hash_ids of {MOONCAKE_BLOCK_TOKENS} tokens do "
                    f"not cover input_length {r.input_length} block by block"
                )
            for block in r.hash_ids:
                if block not in blocks:
                    blocks[block] = content.take(MOONCAKE_BLOCK_TOKENS)
            pieces = [p for block in r.hash_ids[:-1] for p in blocks[block][1]]
            start, last = blocks[r.hash_ids[-1]]
            head = content.cut(last, content.chars(r.input_length - full))
            pieces += head
            spans = [TraceSpan(b, blocks[b][0], len(blocks[b][1])) for b in r.hash_ids[:-1]]
            spans.append(TraceSpan(r.hash_ids[-1], start, len(head)))
        layout = TraceLayout(r.input_length, tuple(spans), content.pieces)
        text = "".join(pieces).rstrip()
        out.append(TraceText(r.line, r.at_s, text, r.output_length, layout))
    note = (
        f"{len(out)} trace requests, each prompt real text of about its input_length at "
        f"{tokens_per_char} tokens a character"
    )
    if blocks:
        note += f"; {len(blocks)} distinct {MOONCAKE_BLOCK_TOKENS}-token blocks, shared as text"
    if content.wrapped:
        note += "; the content ran out and was read again from its start (text repeats)"
    return out, note
