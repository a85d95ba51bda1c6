"""Where shared caches live: outside the clone, so CI and other clones reuse builds and weights."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """`LLMBENCH_CACHE`, else `$XDG_CACHE_HOME/llmbench`, else `~/.cache/llmbench`."""
    explicit = os.environ.get("LLMBENCH_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "llmbench"


def cache_dir(*parts: str) -> Path:
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
