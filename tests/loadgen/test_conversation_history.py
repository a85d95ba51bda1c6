"""`history: model`: a conversation's later turns carry the model's own streamed answers in place
of the dataset's; `history: dataset` (the default) keeps the dataset's, the same prompts for
every server.

Against the law STAND-IN (tests/fixtures/sweeps/law_server.py; no real server gives an answer
that is a known function of the messages): its answer to a chat is drawn from the hash of the
messages' contents joined by newlines, its usage counts a token a word plus two a message and
one for BOS, and it refuses a prompt past its slot with HTTP 400 quoting the prompt's count. So
the answers a session should get are computed here in closed form, turn by turn, from the law
alone, and each recorded answer (or count) proves what its turn sent."""

from __future__ import annotations

import json
import sys

import pytest

from tests.fixtures.sweeps.law import SERVER, Law
from tests.loadgen.test_conversations import conversation
from tests.loadgen.test_law_outputs import PROBE, law_server
from tests.support.engines import left_behind
from workflow_scripts.loadgen.__main__ import dataset_from_args, parse_args
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.datasets import load_dataset
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.prompts import DatasetError, Replay
from workflow_scripts.loadgen.records import ERROR, OK
from workflow_scripts.process.ports import free_port
from workflow_scripts.process.server import ServerProcess, running, wait_ready

pytestmark = pytest.mark.standin

FAST = Law(step_ms=1, step_per_stream_ms=0.1)
MAX_TOKENS = 4
HUMAN_TURNS = [3, 1, 4, 2]  # of each conversation in the file


@pytest.fixture
def sharegpt(tmp_path):
    """Each conversation's first answer is empty (the dataset history leaves it out), the
    others `c<i> answer <t>`: a dataset turn differs from a model turn from turn 2 on."""
    path = tmp_path / "sharegpt.json"
    items = [
        {"id": f"c{i}", "conversations": conversation(i, n)} for i, n in enumerate(HUMAN_TURNS)
    ]
    path.write_text(json.dumps(items))
    return path


def spec(path, **more) -> dict:
    return {"kind": "sharegpt", "path": str(path), "conversations": True, **more}


def question(i: int, turn: int) -> str:
    return f"c{i} question {turn}"


def dataset_contents(i: int, turn: int) -> list[str]:
    """Turn `turn`'s contents with the dataset's answers (the empty first one left out)."""
    out = [question(i, 1)]
    for t in range(2, turn + 1):
        out += ([f"c{i} answer {t - 1}"] if t > 2 else []) + [question(i, t)]
    return out


def own_contents(i: int, turn: int, answers: list[str]) -> list[str]:
    """Turn `turn`'s contents with the model's answers to the turns before it between."""
    out = [question(i, 1)]
    for t in range(2, turn + 1):
        out += [answers[t - 2], question(i, t)]
    return out


def law_chain(i: int, turns: int) -> list[str]:
    """The law's answers to a whole session of conversation i with its own answers as history:
    turn 1's answer is the law's to question 1, turn t's the law's to every content before."""
    answers: list[str] = []
    for t in range(1, turns + 1):
        answers.append(FAST.answer("\n".join(own_contents(i, t, answers)), MAX_TOKENS))
    return answers


def law_prompt_tokens(contents: list[str]) -> int:
    """The stand-in's count of a chat: BOS, and each message's words and its two markers."""
    return 1 + sum(2 + len(c.split()) for c in contents)


def test_model_history_builds_each_turn_from_the_answers_given(sharegpt):
    talk = load_dataset(spec(sharegpt, history="model"), 4).prompts[2].conversation
    assert talk.history == "model" and talk.turns == 4
    answers = [" a1", "", " a3"]  # as streamed: untrimmed, an empty one kept
    sent = talk.messages_for(4, answers)
    assert [m["role"] for m in sent] == ["user", "assistant"] * 3 + ["user"]
    assert [m["content"] for m in sent] == own_contents(2, 4, answers)
    assert talk.messages_for(1, []) == [{"role": "user", "content": question(2, 1)}]
    assert talk.cut(2).history == "model"  # the guard's cut keeps how it is replayed
    plain = load_dataset(spec(sharegpt), 4).prompts[2].conversation
    assert plain.history == "dataset"
    assert [plain.messages_for(t, answers) for t in (1, 2, 3, 4)] == plain.turn_messages()
    assert [m["content"] for m in plain.messages_for(3, answers)] == dataset_contents(2, 3)
    with pytest.raises(DatasetError, match="history"):
        Replay(history="mine")


@pytest.mark.parametrize("record_outputs", [True, False], ids=["recorded", "not recorded"])
def test_each_turn_carries_the_models_own_answers(sharegpt, tmp_path, record_outputs):
    """Two load processes, three sessions at once. With `record_outputs` false no text is
    written, yet each turn still sent the model's answers: the server's own prompt count of
    every turn is that of the law's chain."""
    prompts = load_dataset(spec(sharegpt, history="model"), 4).prompts
    with law_server(FAST, False, tmp_path) as url:
        settings = LoadSettings(
            base_url=url,
            concurrency=3,
            max_tokens=MAX_TOKENS,
            processes=2,
            record_outputs=record_outputs,
        )
        load = run_load(settings, prompts, RunOptions(progress=False))
    assert left_behind(str(SERVER)) == []
    records = [r for r in load.records if not r.warmup]
    assert len(records) == sum(HUMAN_TURNS) and all(r.status == OK for r in records)
    for r in records:
        i = prompts[r.session].index
        chain = law_chain(i, HUMAN_TURNS[i])
        sent = own_contents(i, r.turn, chain)
        assert r.prompt_tokens == law_prompt_tokens(sent), (i, r.turn)
        assert r.output == (chain[r.turn - 1] if record_outputs else None), (i, r.turn)
        if r.turn > 1:  # what the dataset's history would have drawn from the law differs
            theirs = FAST.answer("\n".join(dataset_contents(i, r.turn)), MAX_TOKENS)
            assert chain[r.turn - 1] != theirs
            assert r.prompt_tokens != law_prompt_tokens(dataset_contents(i, r.turn))


def test_dataset_history_sends_the_datasets_answers(sharegpt, tmp_path):
    prompts = load_dataset(spec(sharegpt, history="dataset"), 4).prompts
    with law_server(FAST, False, tmp_path) as url:
        settings = LoadSettings(base_url=url, concurrency=2, max_tokens=MAX_TOKENS)
        load = run_load(settings, prompts, RunOptions(progress=False))
    records = [r for r in load.records if not r.warmup]
    assert len(records) == sum(HUMAN_TURNS) and all(r.status == OK for r in records)
    for r in records:
        i = prompts[r.session].index
        sent = dataset_contents(i, r.turn)
        assert r.output == FAST.answer("\n".join(sent), MAX_TOKENS), (i, r.turn)
        assert r.prompt_tokens == law_prompt_tokens(sent)
        if r.turn > 1:
            assert r.output != law_chain(i, r.turn)[-1]


@pytest.mark.parametrize("history", ["model", "dataset"])
def test_a_failed_turn_ends_its_conversation(sharegpt, tmp_path, history):
    """A 16-token slot, one session at a time: conversation 1 (one turn) is answered;
    conversation 2's turn 1 (6 tokens) too. With `history: model` its turn 2 (17 tokens with
    turn 1's 4-word answer) is refused with nothing streamed; with `dataset` its turn 2 (11)
    is answered and turn 3 (21) refused. Either way no later turn is sent (before, turns 3 and
    4 went out with the failed turn's empty answer as history), and metrics.json's counts say
    where the conversation stopped, why, and the turns it never sent."""
    prompts = load_dataset(spec(sharegpt, history=history), 4).prompts
    prompts = [p for p in prompts if p.index in (1, 2)]
    port = free_port()
    argv = [sys.executable, str(SERVER), *FAST.argv(), "--parallel", "1", "-c", "16"]
    server = ServerProcess([*argv, "--port", str(port)], tmp_path / "law-small.log")
    with running(server):
        url = f"http://127.0.0.1:{port}"
        wait_ready(server, url, "/health", 30, PROBE)
        settings = LoadSettings(base_url=url, concurrency=1, max_tokens=MAX_TOKENS)
        load = run_load(settings, prompts, RunOptions(progress=False))
    records = [r for r in load.records if not r.warmup]
    failed_at = 2 if history == "model" else 3
    assert [(r.session, r.turn, r.status) for r in records] == [
        (0, 1, OK),
        *[(1, turn, OK) for turn in range(1, failed_at)],
        (1, failed_at, ERROR),
    ]
    first = FAST.answer(question(2, 1), MAX_TOKENS)
    sent = own_contents(2, 2, [first]) if history == "model" else dataset_contents(2, 3)
    assert records[-1].error == "http_400"
    assert f"({law_prompt_tokens(sent)} tokens > 16)" in records[-1].error_detail
    figures = compute_metrics(load.records, planned_turns=load.planned_turns)
    assert load.planned_turns == [1, 4] and not load.hit_time_cap
    assert figures["conversations"] == {
        "planned": 2,
        "completed": 1,
        "stopped_by_failure": 1,
        "cut_by_time_cap": 0,
        "stops": [{"session": 1, "prompt_index": 2, "turn": failed_at, "reason": "http_400"}],
    }
    assert figures["turns"] == {
        "planned": 5,
        "sent": 1 + failed_at,
        "completed": failed_at,
        "not_sent_after_failure": 4 - failed_at,
        "cut_by_time_cap": 0,
    }


def test_a_stream_cut_mid_answer_sends_no_later_turn(sharegpt, standin):
    """An in-process STAND-IN (tests/conftest.py) that answers each request whole but the
    second, whose stream it cuts after two content chunks (as a server killed mid-answer
    leaves it). With `history: model` the cut turn is `truncated`, its partial answer kept on
    its record, and the server gets no third request: before, turns 3 and 4 went out carrying
    the partial answer as the model's."""
    received: list[list[dict]] = []

    async def handler(reader, writer):
        while True:
            request = await standin.read_request(reader)
            received.append(json.loads(request.body)["messages"])
            if len(received) == 2:
                cut = standin.event(standin.content("par")) + standin.event(standin.content("t"))
                writer.write(standin.sse_head() + cut + standin.chunk(b""))
            else:
                writer.write(standin.sse_head() + standin.whole_stream(["whole ", "answer"]))
            await writer.drain()

    prompts = [p for p in load_dataset(spec(sharegpt, history="model"), 4).prompts if p.index == 2]
    settings = LoadSettings(
        base_url=standin.start(handler), concurrency=1, max_tokens=MAX_TOKENS, warmup_requests=0
    )
    load = run_load(settings, prompts, RunOptions(progress=False))
    assert [(r.turn, r.status, r.error) for r in load.records] == [
        (1, OK, None),
        (2, ERROR, "truncated"),
    ]
    assert load.records[1].output == "part"
    assert [[m["content"] for m in sent] for sent in received] == [
        own_contents(2, 1, []),
        own_contents(2, 2, ["whole answer"]),
    ]
    figures = compute_metrics(load.records, planned_turns=load.planned_turns)
    assert figures["conversations"]["stops"] == [
        {"session": 0, "prompt_index": 2, "turn": 2, "reason": "truncated"}
    ]
    assert figures["turns"]["not_sent_after_failure"] == 2


def test_the_cli_takes_history_and_refuses_it_alone(sharegpt, capsys):
    base = ["--base-url", "http://127.0.0.1:9", "--dataset-path", str(sharegpt)]
    counts = ["--num-prompts", "2", "--concurrency", "1", "--max-tokens", "4", "--out", "x"]
    args = parse_args([*base, *counts, "--conversations", "--history", "model"])
    assert {p.conversation.history for p in dataset_from_args(args).prompts} == {"model"}
    args = parse_args([*base, *counts, "--conversations"])
    assert {p.conversation.history for p in dataset_from_args(args).prompts} == {"dataset"}
    with pytest.raises(DatasetError, match="--history"):
        dataset_from_args(parse_args([*base, *counts, "--history", "model"]))
    with pytest.raises(SystemExit) as exit_:
        parse_args([*base, *counts, "--conversations", "--history", "mine"])
    assert exit_.value.code == 2 and "--history" in capsys.readouterr().err
