"""Atomic writes: a result file either exists whole or not at all."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[TextIO]:
    """Write to a temp file beside `path`, fsync, then rename over it; nothing on error."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are meant to be read by others
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def write_text(path: str | Path, text: str) -> None:
    with atomic_open(path) as handle:
        handle.write(text)


def write_text_if_changed(path: str | Path, text: str) -> bool:
    """Write `text` unless the file already holds exactly that: an unchanged file keeps its
    mtime, so nothing downstream of it reruns. Returns whether it wrote."""
    try:
        if Path(path).read_text() == text:
            return False
    except OSError:
        pass
    write_text(path, text)
    return True


def write_json(path: str | Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def canonical_json(data: Any) -> str:
    """Stable text for hashing: sorted keys, no whitespace noise."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


# JSON escapes that read back as the same value: no `<`, `>` or `&` is left in the text.
_HTML_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def param_json(data: Any) -> str:
    """A rule param: canonical JSON with no character HTML reads. Snakemake's report embeds
    every job's params, unescaped, inside a `<script>` element, so a config string holding
    `</script>` would otherwise end that element and run as the report's own markup. The text
    is the same as canonical_json's wherever the data holds none of the three characters."""
    return canonical_json(data).translate(_HTML_SAFE)
