"""How a config refusal names a key: the schema names a bad value by its own path, and a missing
or unknown key by its object's path with the key quoted in the message."""

from __future__ import annotations

import re


def names_key(message: str, key: str) -> bool:
    """Whether `message` names `key` (a full key path, `workloads.w.search.min`) in either way."""
    parent, _, last = key.rpartition(".")
    return f"config key '{key}'" in message or bool(
        re.search(rf"config key '{re.escape(parent)}': .*'{re.escape(last)}'", message)
    )
