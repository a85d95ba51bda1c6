"""Arrival traces (loadgen/traces.py): the fixtures in tests/fixtures/traces/ read in both
published formats, every malformed input refused naming its file and line, the window cut on
the trace's own clock and its gaps scaled. The fixtures are small hand-written stand-ins for a
user's trace file: Mooncake's and BurstGPT's real files are too large to ship."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from workflow_scripts.loadgen.traces import (
    MOONCAKE_BLOCK_TOKENS,
    TraceError,
    read_trace,
    window,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
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
    ],
)
def test_each_bad_burstgpt_line_is_refused_by_its_line(tmp_path, row, said):
    path = burstgpt_with(tmp_path, row=row)
    with pytest.raises(TraceError) as caught:
        read_trace(path, "burstgpt")
    assert f"{path}:4:" in str(caught.value) and said in str(caught.value)


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
