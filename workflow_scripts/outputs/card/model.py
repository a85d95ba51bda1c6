"""What a card is, as data: titled sections a renderer turns into Markdown or HTML."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Section:
    """A titled part of a card: a table (header + rows), code blocks, paragraphs, images."""

    title: str
    header: tuple[str, ...] = ()
    rows: list[tuple[str, ...]] = field(default_factory=list)
    code: list[tuple[str, str]] = field(default_factory=list)
    paragraphs: list[str] = field(default_factory=list)
    images: list[tuple[str, str]] = field(default_factory=list)
    bullets: bool = False  # paragraphs as a list


@dataclass
class Card:
    title: str
    status: str
    sections: list[Section]
    tags: list[str]


def fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip()
