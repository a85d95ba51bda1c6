"""The records every prompt source makes (`Prompt`, `Dataset`, a replayed `Conversation` and
how it is replayed, `Replay`) and the error each raises (`DatasetError`): `datasets` reads the
sources into them, the load sends them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .trace_text import TraceLayout


class DatasetError(ValueError):
    """A dataset that cannot give the prompts asked for."""


# What a conversation's later turns carry between its human turns: the dataset's own answers
# (every engine and quant gets the same prompts), or the answers the model streamed itself.
DATASET_HISTORY, MODEL_HISTORY = "dataset", "model"
HISTORIES = (DATASET_HISTORY, MODEL_HISTORY)


@dataclass(frozen=True)
class Replay:
    """How conversations are replayed: at most `max_turns` human turns each (None: all),
    `think_time_s` between an answer and the next turn, `history` one of HISTORIES."""

    max_turns: int | None = None
    think_time_s: float = 0.0
    history: str = DATASET_HISTORY

    def __post_init__(self) -> None:
        if self.history not in HISTORIES:
            raise DatasetError(f"history: {self.history!r} is not one of {', '.join(HISTORIES)}")


def think_time_alone_s(think_time_s: float, max_turns: int | None) -> float:
    """The think time alone of the longest conversation a replay may send, what the time cap
    must exceed for its last turn to go out: (max_turns - 1) x think_time_s. With no
    `max_turns` one gap (two turns, the fewest it counts for): the conversations' own lengths
    are known only once the file is read."""
    return (max_turns - 1 if max_turns else 1) * think_time_s


@dataclass(frozen=True)
class Conversation:
    """A ShareGPT conversation replayed turn by turn: its `messages` as (role, content), from
    its first human turn (`user`) on, the dataset's own answers (`assistant`) between, ending
    with its last replayed human turn; `think_time_s` between an answer and the next turn;
    `history` what a later turn carries between its human turns (HISTORIES)."""

    messages: tuple[tuple[str, str], ...]
    think_time_s: float = 0.0
    history: str = DATASET_HISTORY

    def _ends(self) -> list[int]:
        """Each human turn's end in `messages`."""
        return [i + 1 for i, (role, _) in enumerate(self.messages) if role == "user"]

    @property
    def turns(self) -> int:
        """Its human turns: one request each."""
        return len(self._ends())

    def turn_messages(self) -> list[list[dict[str, str]]]:
        """Each turn's chat messages with the dataset's answers as history: the conversation up
        to and with its t-th human turn."""
        return [_chat(self.messages[:end]) for end in self._ends()]

    def messages_for(self, turn: int, answers: list[str]) -> list[dict[str, str]]:
        """Turn `turn`'s (from 1) chat messages as sent: with `dataset` history its
        `turn_messages()` entry; with `model` its first `turn` human turns with `answers` (the
        model's own to turns 1 .. turn - 1, as streamed, possibly empty) between them."""
        if self.history == DATASET_HISTORY:
            return _chat(self.messages[: self._ends()[turn - 1]])
        humans = [text for role, text in self.messages if role == "user"][:turn]
        said: list[tuple[str, str]] = []
        for human, answer in zip(humans, [*answers[: turn - 1], None], strict=True):
            said.append(("user", human))
            if answer is not None:
                said.append(("assistant", answer))
        return _chat(said)

    def cut(self, turns: int) -> Conversation:
        """The conversation up to and with its `turns`-th human turn."""
        return dataclasses.replace(self, messages=self.messages[: self._ends()[turns - 1]])


def _chat(messages) -> list[dict[str, str]]:
    return [{"role": role, "content": text} for role, text in messages]


@dataclass(frozen=True)
class Prompt:
    """One prompt: its index in the dataset's selection order, and its text (a conversation's:
    its first human turn, and the `conversation` itself)."""

    index: int
    text: str
    expected_output_len: int | None = None
    at_s: float | None = None  # a trace's planned send time from the run's start
    max_tokens: int | None = None  # a trace's output length (None: the load's)
    conversation: Conversation | None = None
    trace: TraceLayout | None = None  # how a trace request's text is made (cell/trace_fit.py)

    @property
    def requests(self) -> int:
        """Requests it sends: one, or one a turn."""
        return self.conversation.turns if self.conversation else 1


@dataclass(frozen=True)
class Dataset:
    prompts: list[Prompt]
    sha256: str
    source: str
    note: str = ""
