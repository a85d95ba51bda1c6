"""A workload's prompts: its `dataset` mapping read by the source registered for its kind
(`sources/`), then, where the workload asks for one, a shared prefix before each prompt."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from .prompts import Dataset, DatasetError, Prompt
from .sources import load_source
from .sources.sharegpt import (
    SHAREGPT_PACKAGE,
    iter_json_array,
    sharegpt_file,
    sharegpt_turn_texts,
)

# A shared prefix's `tokens` counted as characters: about 4 of English text a token.
PREFIX_CHARS_PER_TOKEN = 4


def shared_prefixes(texts: list[str], tokens: int, count: int) -> list[str]:
    """`count` distinct prefixes of about `tokens` tokens (PREFIX_CHARS_PER_TOKEN characters a
    token, cut back to a word's end), each of whole turns in file order, the next one starting
    at the turn after the last one used."""
    chars = tokens * PREFIX_CHARS_PER_TOKEN
    prefixes, turns = [], iter(texts)
    for _ in range(count):
        parts: list[str] = []
        while sum(len(t) + 2 for t in parts) < chars and (text := next(turns, None)) is not None:
            parts.append(text)
        joined = "\n\n".join(parts)
        if len(joined) < chars:
            raise DatasetError(
                f"shared_prefix: the ShareGPT file holds too little text for {count} prefixes of "
                f"{tokens} tokens ({len(prefixes)} made)"
            )
        head = joined[: chars + 1]
        end = max(head.rfind(" "), head.rfind("\n"))
        prefixes.append(head[:end].rstrip() if end > 0 else joined[:chars])
    return prefixes


def with_shared_prefix(
    dataset: Dataset, spec: dict[str, Any], shared_prefix: dict[str, int]
) -> Dataset:
    """Prompt at position i sent after prefix i mod `count` and a blank line; the prefixes are
    ShareGPT text (the workload's own ShareGPT file, else the default package's)."""
    if any(p.conversation is not None for p in dataset.prompts):
        raise DatasetError("shared_prefix: not with conversations (their turns carry history)")
    tokens, count = int(shared_prefix["tokens"]), int(shared_prefix.get("count", 1))
    if spec["kind"] == "sharegpt" and spec.get("path"):
        path = Path(spec["path"])
    else:
        package = spec.get("package") if spec["kind"] == "sharegpt" else None
        path = sharegpt_file(package or SHAREGPT_PACKAGE)
    text = path.read_text(encoding="utf-8", errors="replace")
    prefixes = shared_prefixes(sharegpt_turn_texts(iter_json_array(text)), tokens, count)
    prompts = [
        Prompt(p.index, f"{prefixes[i % count]}\n\n{p.text}", p.expected_output_len)
        for i, p in enumerate(dataset.prompts)
    ]
    note = (
        f"{dataset.note}; " if dataset.note else ""
    ) + f"each prompt after one of {count} shared prefixes of about {tokens} tokens, round-robin"
    return dataclasses.replace(dataset, prompts=prompts, note=note)


def load_dataset(
    spec: dict[str, Any], num_prompts: int, shared_prefix: dict[str, int] | None = None
) -> Dataset:
    """A workload's `dataset` mapping (and `shared_prefix`, if any) -> its prompts."""
    dataset = load_source(spec, num_prompts)
    return with_shared_prefix(dataset, spec, shared_prefix) if shared_prefix else dataset
