"""Prompt sources, one module a dataset kind, each registered by its kind (`registry`): ShareGPT,
its first human turns, whole conversations and every turn's text (`sharegpt`); HumanEval's code
problems (`humaneval`); JSON lines, with the one reader of them (`jsonl`); random words
(`random_words`, the `random` kind); an arrival trace filled with one of them (`trace`). What
they share, choosing the prompts a run sends and a registry package's file unpacked once, is
`base`'s. Adding a kind = one module here, registered, and its keys in the config schema."""

from __future__ import annotations

from . import humaneval, jsonl, random_words, sharegpt, trace  # noqa: F401  (they register)
from .registry import known_kinds, load_source, register

__all__ = ["known_kinds", "load_source", "register"]
