"""A trace's requests filled with real text (the trace itself is read and cut to its window in
`traces`): each request's prompt of about its `input_length` at the content's measured
characters-per-token, a Mooncake block's text fixed by its id so that requests sharing blocks
share their text, and the layout of each prompt, which cell/trace_fit.py fits in the engine's
own tokens."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .traces import MOONCAKE_BLOCK_TOKENS, TraceError, TraceRequest

# Engine tokens a character of content text is estimated at: measured through llama-server's
# /tokenize with SmolLM2-135M's tokenizer on 40 spans each of 256 and 1024 words (medians:
# ShareGPT's ASCII first human turns 0.25 and 0.27, HumanEval's problems 0.31 and 0.30).
TOKENS_PER_CHAR = {"sharegpt": 0.26, "humaneval": 0.30}
_PIECE = re.compile(r"\S+\s*")


@dataclass(frozen=True)
class TraceSpan:
    """A part of a replayed prompt: `words` whole words of the content from word `start` (read
    cyclically); `block`: the Mooncake block id it is the text (or, last, a head) of; None: a
    fresh span."""

    block: int | None
    start: int
    words: int


@dataclass(frozen=True)
class TraceLayout:
    """How a replayed prompt's text is made, so that it can be fitted in an engine's own tokens
    (cell/trace_fit.py): its `input_length`, its spans in order (all but the last: whole
    blocks; the last: a head of its last block, or a fresh span), and the content's words the
    spans index (one tuple shared by every request; left out of comparisons)."""

    input_length: int
    spans: tuple[TraceSpan, ...]
    content: tuple[str, ...] = field(compare=False, repr=False)

    def text(self, span: TraceSpan, words: int | None = None) -> str:
        """The span's first `words` words (None: its own count), each with its whitespace."""
        n = len(self.content)
        count = span.words if words is None else words
        return "".join(self.content[(span.start + i) % n] for i in range(count))


@dataclass(frozen=True)
class TraceText:
    """A replayed request: the trace's line, its planned send time from the run's start, its
    prompt text, its output length in tokens, and how its text is made."""

    line: int
    at_s: float
    text: str
    output_length: int
    layout: TraceLayout | None = None


class _Content:
    """Real text as whole words (each with the whitespace after it, so pieces joined give the
    text back), read cyclically from a cursor: each call to `take` gives the next fresh span."""

    def __init__(self, texts: list[str], tokens_per_char: float) -> None:
        self.pieces = tuple(_PIECE.findall("\n\n".join(texts)))
        self.chars_per_token = 1.0 / tokens_per_char
        self.total_chars = sum(len(p) for p in self.pieces)
        self.cursor = 0
        self.wrapped = False

    def chars(self, tokens: int) -> float:
        return tokens * self.chars_per_token

    def take(self, tokens: int) -> tuple[int, list[str]]:
        """Whole words from the cursor until they hold `tokens` tokens' worth of characters, and
        the index of the first."""
        start = self.cursor % len(self.pieces)
        want, out, size = self.chars(tokens), [], 0
        while size < want:
            if self.cursor == len(self.pieces):
                self.cursor, self.wrapped = 0, True
            piece = self.pieces[self.cursor]
            self.cursor += 1
            out.append(piece)
            size += len(piece)
        return start, out

    @staticmethod
    def cut(pieces: list[str], chars: float) -> list[str]:
        """The shortest head of `pieces` holding at least `chars` characters."""
        out, size = [], 0
        for piece in pieces:
            if size >= chars:
                break
            out.append(piece)
            size += len(piece)
        return out


def trace_texts(
    requests: list[TraceRequest], texts: list[str], tokens_per_char: float, source: Path
) -> tuple[list[TraceText], str]:
    """Each request's prompt from the content `texts` (real text, about `tokens_per_char` engine
    tokens a character), and a note saying how. A request with `hash_ids` is its blocks' texts
    in order: a block is MOONCAKE_BLOCK_TOKENS tokens of text fixed by its id (the next fresh
    span of the content when the id first appears), its last block cut to the tokens left, so
    requests sharing blocks share their text. A request without is a fresh span of its
    `input_length`. Refused, naming the line, when the request needs more text than the
    content holds, or its `hash_ids` do not cover its `input_length` block by block."""
    content = _Content(texts, tokens_per_char)
    blocks: dict[int, tuple[int, list[str]]] = {}
    out = []
    for r in requests:
        where = f"{source}:{r.line}"
        if content.chars(r.input_length) > content.total_chars:
            raise TraceError(
                f"{where}: input_length {r.input_length} needs about "
                f"{content.chars(r.input_length):.0f} characters of content text, which holds "
                f"{content.total_chars}"
            )
        if not r.hash_ids:
            start, pieces = content.take(r.input_length)
            spans = [TraceSpan(None, start, len(pieces))]
        else:
            full = MOONCAKE_BLOCK_TOKENS * (len(r.hash_ids) - 1)
            if not 0 < r.input_length - full <= MOONCAKE_BLOCK_TOKENS:
                raise TraceError(
                    f"{where}: {len(r.hash_ids)} hash_ids of {MOONCAKE_BLOCK_TOKENS} tokens do "
                    f"not cover input_length {r.input_length} block by block"
                )
            for block in r.hash_ids:
                if block not in blocks:
                    blocks[block] = content.take(MOONCAKE_BLOCK_TOKENS)
            pieces = [p for block in r.hash_ids[:-1] for p in blocks[block][1]]
            start, last = blocks[r.hash_ids[-1]]
            head = content.cut(last, content.chars(r.input_length - full))
            pieces += head
            spans = [TraceSpan(b, blocks[b][0], len(blocks[b][1])) for b in r.hash_ids[:-1]]
            spans.append(TraceSpan(r.hash_ids[-1], start, len(head)))
        layout = TraceLayout(r.input_length, tuple(spans), content.pieces)
        text = "".join(pieces).rstrip()
        out.append(TraceText(r.line, r.at_s, text, r.output_length, layout))
    note = (
        f"{len(out)} trace requests, each prompt real text of about its input_length at "
        f"{tokens_per_char} tokens a character"
    )
    if blocks:
        note += f"; {len(blocks)} distinct {MOONCAKE_BLOCK_TOKENS}-token blocks, shared as text"
    if content.wrapped:
        note += "; the content ran out and was read again from its start (text repeats)"
    return out, note
