"""Progress for the person at the terminal: lines reach the process's own stderr even while a
rule script has pointed `sys.stderr` at its log, and are throttled; a table takes the
terminal's width, at most 80 columns."""

from __future__ import annotations

import asyncio
import io
import sys

from workflow_scripts.loadgen.progress import Progress as _Progress
from workflow_scripts.loadgen.records import OK, RequestRecord
from workflow_scripts.terminal import Throttle, human_bytes, say, terminal_width


def test_say_reaches_the_terminal_while_stderr_goes_to_a_log(capfd, monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)  # what entry.stderr_to_log does in a rule
    print("for the log", file=sys.stderr)
    say("for the terminal")
    assert capfd.readouterr().err == "for the terminal\n"
    assert log.getvalue() == "for the log\n"


def test_throttle_lets_one_line_through_per_interval():
    throttle = Throttle(60.0)
    assert throttle.ready() and not throttle.ready()
    assert Throttle(0.0).ready() and Throttle(0.0).ready()


def test_sizes_read_in_powers_of_1024():
    assert [human_bytes(n) for n in (10, 2048, 80e6, 5e9)] == [
        "10 B",
        "2.0 KiB",
        "76.3 MiB",
        "4.7 GiB",
    ]


def test_a_labelled_load_progress_prints_lines_not_a_bar(capfd):
    progress = _Progress(4, label="cell-x", every_s=60.0)
    for _ in range(3):
        record = RequestRecord(index=0, prompt_index=0)
        record.status, record.completion_tokens = OK, 10
        progress.update(record)

    async def briefly() -> None:
        task = asyncio.create_task(progress.run())
        await asyncio.sleep(1.2)  # three ticks, one line: the throttle holds the rest back
        task.cancel()

    asyncio.run(briefly())
    progress.draw(end="\n")
    lines = capfd.readouterr().err.splitlines()
    assert len(lines) == 2
    assert all(line.startswith("cell-x: 3/4 requests, 0 errors") for line in lines)
    assert "\r" not in "".join(lines)


def test_a_table_takes_the_terminals_width_at_most_80_and_80_without_a_terminal(monkeypatch):
    for columns, width in [("60", 60), ("79", 79), ("300", 80), ("10", 40)]:
        monkeypatch.setenv("COLUMNS", columns)
        assert terminal_width() == width
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(sys, "__stdout__", io.StringIO())  # no terminal: CI, a pipe
    assert terminal_width() == 80
