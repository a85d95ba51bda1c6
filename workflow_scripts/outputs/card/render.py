"""A card as text: Markdown beside the results and a self-contained HTML page for the report."""

from __future__ import annotations

from collections.abc import Callable

from ..report_html import esc, page, rows_table
from .model import Card


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(card: Card) -> str:
    lines = [f"# {card.title}", "", f"**Status:** {card.status}", ""]
    for section in card.sections:
        lines += [f"## {section.title}", ""]
        if section.header:
            lines.append("| " + " | ".join(section.header) + " |")
            lines.append("|" + "---|" * len(section.header))
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in section.rows]
            lines.append("")
        for paragraph in section.paragraphs:
            lines += [f"- {paragraph}" if section.bullets else paragraph, ""]
        for label, text in section.code:
            lines += [f"{label}:", "", "```", text, "```", ""]
        for caption, path in section.images:
            lines += [f"![{caption}]({path})", ""]
    lines += ["**Tags:** " + " ".join(f"`{t}`" for t in card.tags), ""]
    return "\n".join(lines)


def render_html(card: Card, image_src: Callable[[str], str]) -> str:
    """`image_src` maps a plot's relative path to what the page embeds (a data URI)."""
    parts = [f"<p><strong>Status:</strong> {esc(card.status)}</p>"]
    for section in card.sections:
        parts.append(f"<h2>{esc(section.title)}</h2>")
        if section.header:
            parts.append(rows_table(section.header, section.rows))
        if section.bullets:
            items = "".join(f"<li>{esc(p)}</li>" for p in section.paragraphs)
            parts.append(f"<ul>{items}</ul>")
        else:
            parts += [f"<p>{esc(p)}</p>" for p in section.paragraphs]
        for label, text in section.code:
            parts.append(f'<p>{esc(label)}:</p><pre class="llmbench">{esc(text)}</pre>')
        for caption, path in section.images:
            parts.append(
                f'<figure class="llmbench"><img src="{image_src(path)}" alt="{esc(caption)}">'
                f"<figcaption>{esc(caption)}</figcaption></figure>"
            )
    tags = "".join(f'<span class="tag">{esc(t)}</span>' for t in card.tags)
    parts.append(f"<p><strong>Tags:</strong> {tags}</p>")
    return page(card.title, "".join(parts))
