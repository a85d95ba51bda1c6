"""One result card per cell, generated from the config's cell and its metrics.json (never typed
by hand): model facts, measured results with how each was measured, published reference figures
beside them, spec-decode acceptance, its outputs against its reference's, the full server and
client commands, provenance, plots, notes and tags. A card is data (`model`) built from its
parts (`configuration`, `measured`, `provenance`, and output fidelity's section from
outputs/fidelity/card.py, put in order by `build`), rendered twice (`render`: Markdown beside
the results, a self-contained HTML page for the Snakemake report) and written by the card rule
(`files`)."""

from __future__ import annotations

from .build import build_card
from .configuration import parameter_bucket
from .files import write_card
from .model import Card, Section
from .provenance import client_command
from .render import render_html, render_markdown

__all__ = [
    "Card",
    "Section",
    "build_card",
    "client_command",
    "parameter_bucket",
    "render_html",
    "render_markdown",
    "write_card",
]
