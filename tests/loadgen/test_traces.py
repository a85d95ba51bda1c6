"""Arrival traces (loadgen/traces.py): the fixtures in tests/fixtures/traces/ read in both
published formats, every malformed input refused naming its file and line, the window cut on
the trace's own clock and its gaps scaled. The fixtures are small hand-written stand-ins for a
user's trace file: Mooncake's and BurstGPT's real files are too large to ship."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workflow_scripts.loadgen.traces import (
    MAX_TRACE_BYTES,
    MOONCAKE_BLOCK_TOKENS,
    TraceError,
    read_trace,
    window,
)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "traces"
MOONCAKE = FIXTURES / "mooncake.jsonl"
BURSTGPT = FIXTURES / "burstgpt.csv"


def test_mooncake_reads_every_line_in_seconds_with_its_blocks():
    rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    trace = read_trace(MOONCAKE, "mooncake")
    assert [r.line for r in trace] == list(range(1, len(rows) + 1))
    assert [r.at_s for r in trace] == [row["timestamp"] / 1000 for row in rows]
    assert [r.input_length for r in trace] == [row["input_length"] for row in rows]
    assert [r.output_length for r in trace] == [row["output_length"] for row in rows]
    assert [list(r.hash_ids) for r in trace] == [row["hash_ids"] for row in rows]
    # the fixture is shaped as Mooncake's traces are: one id per started 512-token block, and
    # some blocks shared (the prefix reuse a replay must keep)
    assert all(len(r.hash_ids) == math.ceil(r.input_length / MOONCAKE_BLOCK_TOKENS) for r in trace)
    ids = [i for r in trace for i in r.hash_ids]
    assert len(set(ids)) < len(ids)


def test_burstgpt_reads_its_columns_and_ignores_the_others():
    lines = BURSTGPT.read_text().splitlines()
    cells = [line.split(",") for line in lines[1:]]
    trace = read_trace(BURSTGPT, "burstgpt")
    assert [r.line for r in trace] == list(range(2, len(lines) + 1))  # line 1: the header
    assert [r.at_s for r in trace] == [float(c[0]) for c in cells]
    assert [(r.input_length, r.output_length) for r in trace] == [
        (int(c[2]), int(c[3])) for c in cells
    ]
    assert all(r.hash_ids == () for r in trace)


def mooncake_with(tmp_path, line: int, row) -> Path:
    """The fixture with its `line` (1-based) replaced by `row` (a dict, or raw text)."""
    lines = MOONCAKE.read_text().splitlines()
    lines[line - 1] = row if isinstance(row, str) else json.dumps(row)
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = {"timestamp": 100, "input_length": 10, "output_length": 5, "hash_ids": [1]}


@pytest.mark.parametrize(
    ("row", "said"),
    [
        ({k: v for k, v in GOOD.items() if k != "hash_ids"}, "missing key(s) hash_ids"),
        ({k: v for k, v in GOOD.items() if k != "timestamp"}, "missing key(s) timestamp"),
        ({**GOOD, "input_length": 10.5}, "`input_length` must be a whole number"),
        ({**GOOD, "output_length": "5"}, "`output_length` must be a whole number"),
        ({**GOOD, "timestamp": "100"}, "`timestamp` must be a number"),
        ({**GOOD, "output_length": 0}, "`output_length` must be at least 1"),
        ({**GOOD, "timestamp": -1}, "`timestamp` is negative"),
        ({**GOOD, "timestamp": 5}, "time goes back"),  # line 3 before line 2's 40 ms
        ({**GOOD, "hash_ids": [1, "a"]}, "`hash_ids` must be a list"),
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_each_bad_mooncake_line_is_refused_by_its_line(tmp_path, row, said):
    path = mooncake_with(tmp_path, 3, row)
    with pytest.raises(TraceError) as caught:
        read_trace(path, "mooncake")
    assert f"{path}:3:" in str(caught.value) and said in str(caught.value)


def burstgpt_with(tmp_path, header: str | None = None, row: str | None = None) -> Path:
    """The fixture with its header or its line 4 (the third request) replaced."""
    lines = BURSTGPT.read_text().splitlines()
    if header is not None:
        lines[0] = header
    if row is not None:
        lines[3] = row
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("row", "said"),
    [
        ("6,GPT-4,41.5,9,426,API log", "`Request tokens` must be a whole number"),
        ("6,GPT-4,417,0,417,API log", "`Response tokens` must be at least 1"),
        ("6,GPT-4,-4,9,426,API log", "`Request tokens` must be a whole number"),
        ("-6,GPT-4,417,9,426,API log", "`Timestamp` is negative"),
        ("2,GPT-4,417,9,426,API log", "time goes back"),
        ("soon,GPT-4,417,9,426,API log", "`Timestamp` must be a number"),
        (
            "6,GPT-4,4e1,9,426,API log",
            "`Request tokens` must be a whole number of tokens, got '4e1'",
        ),
        (
            "6,GPT-4,417,9.0,426,API log",
            "`Response tokens` must be a whole number of tokens, got '9.0'",
        ),
    ],
)
def test_each_bad_burstgpt_line_is_refused_by_its_line(tmp_path, row, said):
    path = burstgpt_with(tmp_path, row=row)
    with pytest.raises(TraceError) as caught:
        read_trace(path, "burstgpt")
    assert f"{path}:4:" in str(caught.value) and said in str(caught.value)


def test_a_row_csv_cannot_read_is_refused_by_its_line(tmp_path):
    """A field past csv's limit (131,072 characters) used to end the read in a bare csv.Error."""
    path = burstgpt_with(tmp_path, row="6,GPT-4," + "7" * 200_000 + ",9,426,API log")
    with pytest.raises(TraceError, match=r"bad\.csv:4: not CSV \(field larger than field limit"):
        read_trace(path, "burstgpt")


def test_a_missing_burstgpt_column_is_refused_by_name(tmp_path):
    path = burstgpt_with(tmp_path, header="Timestamp,Model,Request tokens,Tokens,Total,Log Type")
    with pytest.raises(TraceError, match=r"bad\.csv:1: missing column\(s\) Response tokens"):
        read_trace(path, "burstgpt")


def test_an_empty_trace_and_an_unknown_format_are_refused(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(TraceError, match="no request"):
        read_trace(empty, "mooncake")
    with pytest.raises(TraceError, match="unknown trace format 'azure'"):
        read_trace(MOONCAKE, "azure")


def test_the_window_cuts_on_the_trace_clock_and_scales_the_gaps():
    trace = read_trace(BURSTGPT, "burstgpt")
    start, duration, scale = 8.0, 7.0, 0.5
    kept = window(trace, start_s=start, duration_s=duration, time_scale=scale)
    inside = [r for r in trace if start <= r.at_s < start + duration]
    assert 0 < len(inside) < len(trace)
    assert [r.line for r in kept] == [r.line for r in inside]
    assert [r.at_s for r in kept] == [(r.at_s - start) * scale for r in inside]
    assert [r.input_length for r in kept] == [r.input_length for r in inside]
    whole = window(trace)  # the defaults: all of it, on its own clock
    assert [r.at_s for r in whole] == [r.at_s for r in trace]


def test_an_empty_or_impossible_window_is_refused():
    trace = read_trace(MOONCAKE, "mooncake")
    with pytest.raises(TraceError, match="no request of the trace lies in"):
        window(trace, start_s=100.0)
    for bad in ({"start_s": -1.0}, {"duration_s": 0.0}, {"time_scale": 0.0}):
        with pytest.raises(TraceError, match="a window needs"):
            window(trace, **bad)


def test_a_time_the_scale_takes_past_any_number_is_refused_naming_the_line():
    """BurstGPT's seconds x 1e308 overflow to infinity: a request due at `inf` would be waited
    for without end."""
    with pytest.raises(TraceError, match=r"^line 2: its time x time_scale 1e\+308 is past any"):
        window(read_trace(BURSTGPT, "burstgpt"), time_scale=1e308)


# -- what is read at all: a regular UTF-8 file within the cap, and never a hang ------------------

# read_trace in a child bounded in memory and time, so a reader that reads /dev/zero to the end
# fails there (MemoryError) and one that blocks opening a named pipe is killed at the timeout,
# instead of taking the suite with it.
BOUNDED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from workflow_scripts.loadgen.traces import TraceError, read_trace
try:
    read_trace(sys.argv[1], sys.argv[2])
except TraceError as exc:
    print(exc)
    sys.exit(3)
"""
BOUND_S = 30


def refusal(path: Path | str, fmt: str = "mooncake") -> str:
    """What read_trace refused `path` with, read in a bounded child."""
    proc = subprocess.run(
        [sys.executable, "-c", BOUNDED, str(path), fmt],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=BOUND_S,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    return proc.stdout.strip()


def test_only_a_regular_file_is_opened_and_a_pipe_or_a_device_never_blocks_or_floods(tmp_path):
    """Real OS objects: a named pipe no one writes to (opening it to read blocks for ever) and
    /dev/zero (it reads until memory runs out)."""
    pipe = tmp_path / "trace.jsonl"
    os.mkfifo(pipe)
    assert refusal(pipe) == f"{pipe}: a named pipe, not a regular file"
    assert refusal("/dev/zero") == "/dev/zero: a device, not a regular file"
    assert refusal(tmp_path) == f"{tmp_path}: a directory, not a regular file"
    assert refusal(tmp_path / "none.csv", "burstgpt") == f"{tmp_path / 'none.csv'}: no such file"


def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path):
    """A sparse file one byte over the cap: its size is known without reading it."""
    path = tmp_path / "huge.jsonl"
    with path.open("wb") as handle:
        handle.truncate(MAX_TRACE_BYTES + 1)
    assert refusal(path) == (
        f"{path}: {MAX_TRACE_BYTES + 1} bytes, over the 256 MiB a trace may have (cut it to the "
        "window you replay)"
    )


@pytest.mark.parametrize("fmt", ["mooncake", "burstgpt"])
def test_bytes_that_are_not_utf8_are_refused_naming_the_line(tmp_path, fmt):
    source = MOONCAKE if fmt == "mooncake" else BURSTGPT
    lines = source.read_bytes().split(b"\n")
    lines[3] += b" caf\xe9"  # line 4 ends in a Latin-1 e-acute
    path = tmp_path / source.name
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(TraceError) as caught:
        read_trace(path, fmt)
    assert str(caught.value) == f"{path}:4: not UTF-8 text (byte 0xe9)"
