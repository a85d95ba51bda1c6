"""Text helpers every package uses: the first line of a message, the tail of a log."""

from __future__ import annotations

from pathlib import Path


def first_line(text: str | None, limit: int = 300) -> str:
    """The first line of `text`, cut to `limit` characters (a reason fits a table cell)."""
    return text.strip().splitlines()[0][:limit] if text and text.strip() else ""


def tail(path: str | Path, lines: int = 20) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
