"""Small self-contained HTML pieces for the Snakemake report: tables, pages with embedded
figures (the front page that report/workflow.rst includes is front_page.py's)."""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ..atomic import write_text

PAGE_STYLE = """
body { font-family: "DejaVu Sans", Arial, sans-serif; margin: 1.5em; color: #222; }
"""
# Scoped to our own elements, so the report's front page keeps its own look.
STYLE = """
table.llmbench { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1.5em; }
table.llmbench th, table.llmbench td { border: 1px solid #ccc; padding: 3px 7px;
  text-align: left; vertical-align: top; }
table.llmbench th { background: #f0f2f5; }
table.llmbench td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure.llmbench { display: inline-block; margin: 0.5em 1em 1em 0; }
figure.llmbench img { max-width: 100%; border: 1px solid #eee; }
figure.llmbench figcaption { font-size: 0.85em; color: #555; }
pre.llmbench { background: #f6f8fa; padding: 0.6em; white-space: pre-wrap;
  word-break: break-all; font-size: 0.8em; }
span.tag { display: inline-block; background: #e8eef7; border-radius: 3px;
  padding: 1px 6px; margin: 2px; font-size: 0.85em; }
"""


# A table cell already written as text (the compact summary, the index) is still a number.
_NUMBER_TEXT = re.compile(r"-?\d+(\.\d+)?")


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _cell_text(value: Any) -> tuple[str, bool]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "", False
    if isinstance(value, bool):
        return str(value), False
    if isinstance(value, float):
        return f"{value:.2f}", True
    if isinstance(value, str):
        return value, _NUMBER_TEXT.fullmatch(value) is not None
    return str(value), isinstance(value, int)


def html_table(frame: pd.DataFrame) -> str:
    """A DataFrame as an escaped HTML table; numbers right-aligned with two decimals."""
    if not len(frame):
        return "<p><em>no rows</em></p>"
    head = "".join(f"<th>{esc(c)}</th>" for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False):
        cells = []
        for value in row:
            text, numeric = _cell_text(value)
            cls = ' class="num"' if numeric else ""
            cells.append(f"<td{cls}>{esc(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<table class="llmbench"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def rows_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    return html_table(pd.DataFrame([list(r) for r in rows], columns=list(header)))


def data_uri(path: str | Path) -> str:
    path = Path(path)
    mime = {".png": "image/png", ".svg": "image/svg+xml"}.get(path.suffix, "")
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def figure_html(path: str | Path, caption: str) -> str:
    return (
        f'<figure class="llmbench"><img src="{data_uri(path)}" alt="{esc(caption)}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{PAGE_STYLE}{STYLE}</style></head>"
        f"<body><h1>{esc(title)}</h1>{body}</body></html>\n"
    )


def write_tables_html(
    path: str | Path, title: str, tables: Sequence[tuple[str, pd.DataFrame, str]]
) -> None:
    """A page of (heading, table, note) sections."""
    body = "".join(
        f"<h2>{esc(heading)}</h2>" + (f"<p>{esc(note)}</p>" if note else "") + html_table(frame)
        for heading, frame, note in tables
    )
    write_text(path, page(title, body))


def report_command(
    snakefile: str, workdir: str, configfile: str, html_path: str, stylesheet: str
) -> list[str]:
    """`snakemake --report` for the same workflow, directory and config. It runs from inside the
    workflow's own last job, whose lock it must not wait for (`--nolock`)."""
    return [
        *(sys.executable, "-m", "snakemake", "--snakefile", snakefile, "--directory", workdir),
        *("--configfile", configfile, "--replace-workflow-config", "--nolock", "--cores", "1"),
        *("--report", html_path, "--report-stylesheet", stylesheet),
    ]


def write_report(snakefile: str, config: dict, html_path: str | Path, stylesheet: str, log) -> None:
    """Build Snakemake's self-contained HTML report into a temp file, then rename it."""
    target = Path(html_path).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".report-") as tmp:
        # YAML: Snakemake reads a JSON config file into OrderedDicts, which the matrix refuses.
        configfile = Path(tmp) / "config.yaml"
        plain = json.loads(json.dumps(config, default=str))
        configfile.write_text(yaml.safe_dump(plain, sort_keys=False))
        partial = Path(tmp) / "report.html"
        argv = report_command(snakefile, os.getcwd(), str(configfile), str(partial), stylesheet)
        print("$ " + shlex.join(argv), file=log, flush=True)
        subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=True)
        os.replace(partial, target)
