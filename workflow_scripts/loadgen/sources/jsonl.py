"""JSON lines: the one reader of them (`json_lines`, each line's value and where it stands, a
line that is not JSON refused naming the file and the line), and the `jsonl` kind, one JSON
object a line with `prompt` (or `text`) and an optional `output_len`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ...registry_fetch import sha256_file
from ..prompts import Dataset, DatasetError, Prompt
from .base import select_prompts
from .registry import register


def json_lines(path: str | Path, lines: Iterable[str]) -> Iterator[tuple[str, Any]]:
    """Each non-blank line's JSON value with where it stands (`path:line`, from line 1); a line
    that is not JSON is refused naming both."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: not JSON: {exc.msg}") from exc
        yield where, value


def load_jsonl(
    path: str | Path,
    num_prompts: int,
    shuffle_seed: int | None = None,
    max_prompt_chars: int | None = None,
) -> Dataset:
    """One JSON object a line with `prompt` (or `text`); optional `output_len`."""
    texts, lengths = [], []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text (byte {exc.start}): not a JSONL file") from None
    for where, obj in json_lines(path, lines):
        prompt = obj.get("prompt", obj.get("text")) if isinstance(obj, dict) else None
        if not isinstance(prompt, str) or not prompt:
            raise DatasetError(f"{where}: needs a non-empty 'prompt' string")
        texts.append(prompt)
        lengths.append(obj.get("output_len"))
    chosen = select_prompts(texts, num_prompts, shuffle_seed, max_prompt_chars)
    prompts = [Prompt(p.index, p.text, lengths[p.index]) for p in chosen]
    return Dataset(prompts, sha256_file(path), str(path))


@register("jsonl")
def jsonl_source(spec: Mapping[str, Any], num_prompts: int) -> Dataset:
    return load_jsonl(
        spec["path"], num_prompts, spec.get("shuffle_seed"), spec.get("max_prompt_chars")
    )
