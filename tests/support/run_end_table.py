"""Reading back the table a run ends with (`workflow_scripts.outputs.run_end`): each row's full
cell id (its group's header and its name), the words after the name (status, figures, a reason
beside them) and the reason wrapped below it. For the tests that check the terminal's output."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from workflow_scripts.outputs.run_end import ROW_INDENT


@dataclass
class EndRow:
    """One row of the end table as a reader sees it."""

    cell: str
    words: list[str] = field(default_factory=list)
    reason_below: str = ""

    def reason(self) -> str:
        """A failed or blocked row's reason: below it, or beside its status (no figures there)."""
        return self.reason_below or " ".join(self.words[1:])


def end_table(output: str) -> list[str]:
    """The last end-of-run table in a run's output: its header line to the report's line."""
    lines = output[output.rindex("\ncell ") + 1 :].splitlines()
    return lines[: next(i for i, line in enumerate(lines) if line.startswith("Report: ")) + 1]


def table_rows(table: Sequence[str]) -> list[EndRow]:
    """The rows of `table` (from its header line on), in the order shown, up to the outcome."""
    prefix, rows = "", []
    for line in table[1:]:
        if not line.startswith(" "):  # a group's header, or the outcome after the last row
            if not line.endswith("__"):
                break
            prefix = line
            continue
        body = line.strip()
        if line == ROW_INDENT + body:  # a row's name, and its words when they fit beside it
            name, *words = body.split()
            rows.append(EndRow(prefix + name, words))
        elif not rows[-1].words:  # the words of a name too long to sit beside them
            rows[-1].words = body.split()
        else:
            rows[-1].reason_below = f"{rows[-1].reason_below} {body}".strip()
    return rows
