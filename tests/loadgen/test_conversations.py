"""`conversations: true`: whole ShareGPT conversations replayed turn by turn, the dataset's own
answers as history; records carry `session` and `turn`, metrics.json `by_turn`; a conversation
that passes the context is cut at its last turn that fits; bad input refused before anything
runs.

Against the law STAND-IN (tests/fixtures/sweeps/law_server.py): its answer to a chat is drawn
from the hash of the messages' contents joined by newlines, so each recorded answer proves the
exact messages its turn sent."""

from __future__ import annotations

import copy
import dataclasses
import json
import sys

import pytest

from tests.fixtures.sweeps.law import SERVER, Law
from tests.loadgen.test_cli import run_cli
from tests.loadgen.test_law_outputs import law_server
from tests.support.config import default_config, setter
from tests.support.engines import left_behind, make_config, one_cell
from workflow_scripts.cell.context_guard import (
    ContextGuardReport,
    fitting,
    guard_prompts,
    request_texts,
)
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.engines import adapter_for
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.closed_loop import schedule
from workflow_scripts.loadgen.command import client_argv
from workflow_scripts.loadgen.datasets import load_dataset
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.records import ERROR, INCOMPLETE, OK, RequestRecord
from workflow_scripts.process.ports import free_port
from workflow_scripts.process.server import ServerProcess, running, wait_ready
from workflow_scripts.vocabulary import ConfigError

FAST = Law(step_ms=1, step_per_stream_ms=0.1)
MAX_TOKENS = 4
HUMAN_TURNS = [3, 1, 4, 2, 3, 2]  # of each conversation in the file


def conversation(i: int, humans: int) -> list[dict]:
    """Opens with a gpt turn (split conversations do), an empty gpt turn after the first human
    one: neither is replayed; the last human turn is followed by an answer never sent."""
    turns = [{"from": "gpt", "value": f"greeting {i}"}]
    for t in range(1, humans + 1):
        turns.append({"from": "human", "value": f"c{i} question {t}"})
        turns.append({"from": "gpt", "value": "" if t == 1 else f"c{i} answer {t}"})
    return turns


@pytest.fixture
def sharegpt(tmp_path):
    path = tmp_path / "sharegpt.json"
    items = [
        {"id": f"c{i}", "conversations": conversation(i, n)} for i, n in enumerate(HUMAN_TURNS)
    ]
    path.write_text(json.dumps(items))
    return path


def expected_messages(i: int, turn: int) -> list[dict]:
    """Turn `turn` of conversation i: its first `turn` human turns, its answers between (the
    empty first answer left out)."""
    out = [{"role": "user", "content": f"c{i} question 1"}]
    for t in range(2, turn + 1):
        out += [
            {"role": "assistant", "content": f"c{i} answer {t - 1}"} if t > 2 else None,
            {"role": "user", "content": f"c{i} question {t}"},
        ]
    return [m for m in out if m is not None]


def spec(path, **more) -> dict:
    return {"kind": "sharegpt", "path": str(path), "conversations": True, **more}


def test_each_turn_is_the_conversation_so_far(sharegpt):
    data = load_dataset(spec(sharegpt), 6)
    assert [p.requests for p in data.prompts] == HUMAN_TURNS
    for p in data.prompts:
        assert p.text == f"c{p.index} question 1"  # prompt_indices and the guard read it
        turns = p.conversation.turn_messages()
        assert turns == [expected_messages(p.index, t) for t in range(1, len(turns) + 1)]
    capped = load_dataset(spec(sharegpt, max_turns=2, think_time_s=0.5), 6).prompts
    assert [p.requests for p in capped] == [min(n, 2) for n in HUMAN_TURNS]
    assert capped[0].conversation.think_time_s == 0.5
    plain = load_dataset({"kind": "sharegpt", "path": str(sharegpt)}, 6).prompts
    assert [p.text for p in plain] == [p.text for p in data.prompts]
    assert all(p.conversation is None and p.requests == 1 for p in plain)


def test_sessions_replay_against_the_law_standin(sharegpt, tmp_path):
    """Two load processes, three sessions at once: every answer is the law's for exactly its
    turn's messages; a session's turns run one after another, in one worker; by_turn counts
    the requests of each turn."""
    prompts = load_dataset(spec(sharegpt), 6).prompts
    with law_server(FAST, False, tmp_path) as url:
        settings = LoadSettings(
            base_url=url, concurrency=3, max_tokens=MAX_TOKENS, processes=2, warmup_requests=1
        )
        load = run_load(settings, prompts, RunOptions(progress=False))
    assert left_behind(str(SERVER)) == []
    assert load.processes.processes == 2 and load.not_started == 0
    records = [r for r in load.records if not r.warmup]
    assert len(records) == sum(HUMAN_TURNS)
    assert [r.index for r in records] == list(range(sum(HUMAN_TURNS)))
    assert all(r.status == OK for r in records)
    for r in records:
        messages = expected_messages(prompts[r.session].index, r.turn)
        assert r.prompt_index == prompts[r.session].index
        text = "\n".join(m["content"] for m in messages)
        assert r.output == FAST.answer(text, MAX_TOKENS), (r.session, r.turn)
    for session in range(6):
        mine = [r for r in records if r.session == session]
        assert [r.turn for r in mine] == list(range(1, HUMAN_TURNS[session] + 1))
        for before, after in zip(mine, mine[1:], strict=False):
            assert after.sent_s >= before.sent_s + before.e2e_s  # sent once the last ended
    llamacpp = adapter_for("llamacpp")
    by_turn = compute_metrics(load.records, turn_hit_pct=llamacpp.turn_hit_pct)["by_turn"]
    assert [(row["turn"], row["requests"]) for row in by_turn] == [
        (t, sum(n >= t for n in HUMAN_TURNS)) for t in range(1, max(HUMAN_TURNS) + 1)
    ]
    assert all(row["ttft_ms"]["count"] == row["requests"] for row in by_turn)
    # the stand-in's timings carry no cache_n without --law-prefix-cache: nothing reported
    assert not any("prefix_cache_hit_pct" in row for row in by_turn)


def test_under_poisson_arrivals_a_session_starts_at_its_scheduled_time(sharegpt, tmp_path):
    """With `request_rate` each session's first turn records its Poisson arrival (`scheduled_s`)
    and is sent at it; its later turns wait for an answer, not a clock, and record none; the
    send lag is over the first turns alone."""
    prompts = load_dataset(spec(sharegpt), 6).prompts
    settings = LoadSettings(
        base_url="", concurrency=3, max_tokens=MAX_TOKENS, request_rate=20.0, warmup_requests=0
    )
    planned = schedule(prompts, settings)
    with law_server(FAST, False, tmp_path) as url:
        settings = dataclasses.replace(settings, base_url=url)
        load = run_load(settings, prompts, RunOptions(progress=False))
    firsts = sorted((r for r in load.records if r.turn == 1), key=lambda r: r.session)
    assert [r.scheduled_s for r in firsts] == planned
    assert all(r.sent_s >= r.scheduled_s for r in firsts)
    assert all(r.scheduled_s is None for r in load.records if r.turn > 1)
    lag = compute_metrics(load.records)["send_lag_ms"]
    assert lag is not None and 0 <= lag["p50"] <= lag["p99"]


def test_the_time_cap_cuts_conversations_and_counts_the_turns_that_never_ran(sharegpt, tmp_path):
    """A think time (5 s) past the cap (2 s): every session sends its first turn at once (six
    sessions, six workers), then none may send another. Conversation 1 (one turn) completes;
    the other five are cut before their turn 2, without sleeping through the think time:
    15 turns planned, 6 sent, 9 never ran."""
    prompts = load_dataset(spec(sharegpt, think_time_s=5.0), 6).prompts
    with law_server(FAST, False, tmp_path) as url:
        settings = LoadSettings(
            base_url=url, concurrency=6, max_tokens=MAX_TOKENS, max_seconds=2.0, warmup_requests=0
        )
        load = run_load(settings, prompts, RunOptions(progress=False))
    records = [r for r in load.records if not r.warmup]
    assert sorted((r.session, r.turn, r.status) for r in records) == [
        (session, 1, OK) for session in range(6)
    ]
    assert load.hit_time_cap and load.planned_turns == HUMAN_TURNS
    assert max(r.sent_s + r.e2e_s for r in records) < 2.0  # no turn after the cap
    figures = compute_metrics(load.records, hit_time_cap=True, planned_turns=load.planned_turns)
    assert figures["turns"] == {
        "planned": 15,
        "sent": 6,
        "completed": 6,
        "not_sent_after_failure": 0,
        "cut_by_time_cap": 9,
    }
    talks = figures["conversations"]
    assert (talks["planned"], talks["completed"], talks["cut_by_time_cap"]) == (6, 1, 5)
    assert talks["stops"] == [
        {"session": s, "prompt_index": s, "turn": 2, "reason": "time_cap"} for s in (0, 2, 3, 4, 5)
    ]


def test_conversation_counts_say_how_each_conversation_ended():
    """Hand-made records of five planned conversations: one whole (2 turns), one stopped by
    a timeout at turn 2 of 4, one whose turn 2 of 3 the cap cancelled in flight, one the cap
    cut before its turn 3 of 3, one never started (2 turns). Outside conversations: null."""

    def turn(session, number, status=OK, error=None):
        where = {"session": session, "turn": number}
        return RequestRecord(10 * session + number, 100 + session, status, error=error, **where)

    records = [
        turn(0, 1), turn(0, 2),
        turn(1, 1), turn(1, 2, ERROR, "timeout"),
        turn(2, 1), turn(2, 2, INCOMPLETE),
        turn(3, 1), turn(3, 2),
    ]  # fmt: skip
    figures = compute_metrics(records, hit_time_cap=True, planned_turns=[2, 4, 3, 3, 2])
    assert figures["conversations"] == {
        "planned": 5,
        "completed": 1,
        "stopped_by_failure": 1,
        "cut_by_time_cap": 3,
        "stops": [
            {"session": 1, "prompt_index": 101, "turn": 2, "reason": "timeout"},
            {"session": 2, "prompt_index": 102, "turn": 2, "reason": "time_cap"},
            {"session": 3, "prompt_index": 103, "turn": 3, "reason": "time_cap"},
        ],
    }
    assert figures["turns"] == {
        "planned": 14,
        "sent": 8,
        "completed": 6,
        "not_sent_after_failure": 2,
        "cut_by_time_cap": 4,
    }
    plain = compute_metrics([RequestRecord(0, 0, OK)])
    assert plain["conversations"] is None and plain["turns"] is None


def test_by_turn_is_null_outside_conversations_and_reads_the_cache_per_turn():
    """Hand-made records (a STAND-IN for llama.cpp's timings): turn 2 reused 30 of 40 prompt
    tokens, turn 1 none."""
    plain = [RequestRecord(0, 0, status=OK, ttft_s=0.1, e2e_s=0.2, completion_tokens=3)]
    assert compute_metrics(plain)["by_turn"] is None
    assert plain[0].to_dict()["session"] is None and plain[0].to_dict()["turn"] is None
    talk = [
        RequestRecord(0, 5, OK, ttft_s=0.1, e2e_s=0.3, completion_tokens=3, session=0, turn=1),
        RequestRecord(1, 5, OK, ttft_s=0.2, e2e_s=0.4, completion_tokens=3, session=0, turn=2),
    ]
    talk[0].timings = {"cache_n": 0, "prompt_n": 12}
    talk[1].timings = {"cache_n": 30, "prompt_n": 10}
    rows = compute_metrics(talk, turn_hit_pct=adapter_for("llamacpp").turn_hit_pct)["by_turn"]
    assert [r["prefix_cache_hit_pct"] for r in rows] == [0.0, 75.0]
    assert "prefix_cache_hit_pct" not in compute_metrics(talk)["by_turn"][0]  # no engine named
    assert [r["ttft_ms"]["mean"] for r in rows] == pytest.approx([100.0, 200.0])
    assert [r["tpot_ms"]["mean"] for r in rows] == pytest.approx([100.0, 100.0])


def test_the_context_cap_cuts_at_the_last_turn_that_fits(sharegpt):
    prompt = load_dataset(spec(sharegpt), 6).prompts[2]  # four human turns
    texts = request_texts(prompt)
    assert texts[1] == "c2 question 1\n\nc2 question 2"
    counts = [10, 20, 30, 40]
    assert fitting(prompt, counts, 40) is prompt
    cut = fitting(prompt, counts, 25)
    assert cut.requests == 2 and cut.conversation.turn_messages() == [
        expected_messages(2, 1),
        expected_messages(2, 2),
    ]
    assert fitting(prompt, counts, 9) is None
    report = ContextGuardReport("skip", 100, 8)
    assert "cut_conversations" not in report.to_dict()  # as before, outside conversations
    report.cut_conversations = [{"index": 2, "turns": 4, "kept": 2}]
    assert report.to_dict()["cut_conversations"] == report.cut_conversations
    report.enforce()  # skip: a cut is said, not fatal
    with pytest.raises(RuntimeError, match="conversations pass the per-slot context"):
        ContextGuardReport("fail", 100, 8, cut_conversations=[{"index": 2}]).enforce()


def test_the_guard_cuts_conversations_by_the_servers_own_counts(sharegpt, tmp_path):
    """The law stand-in as a llama-server with a 16-token slot (-c 128, 8 slots): it counts a
    token a word, + 1 for BOS, its chat template 2 words more; with max_tokens 4 a turn fits
    with at most 12. Each conversation keeps its turns up to the last that fits, is counted
    and said; none is dropped (every first turn fits)."""
    prompts = load_dataset(spec(sharegpt), 6).prompts
    argv = [sys.executable, str(SERVER), *FAST.argv(), "--parallel", "8", "-c", "128"]
    port = free_port()
    server = ServerProcess([*argv, "--port", str(port)], tmp_path / "law.log")
    engine = {"kind": "llamacpp", "launch": "native", "binary": "llama-server", "settings": {}}
    cell = one_cell(
        make_config(
            {"llama": engine},
            [{"model": "m", "engine": "llama", "workload": "w"}],
            workload={"max_tokens": 4},
            context_guard="skip",
        )
    )
    with running(server):
        url = f"http://127.0.0.1:{port}"
        wait_ready(server, url, "/health", 30)
        kept, report = guard_prompts(cell, adapter_for("llamacpp"), url, prompts)
    fits = [sum(1 for t in request_texts(p) if len(t.split()) + 3 <= 12) for p in prompts]
    assert report.per_slot_context == 16 and report.skipped == []
    assert [p.requests for p in kept] == fits and fits != HUMAN_TURNS
    assert report.cut_conversations == [
        {"index": p.index, "turns": p.requests, "kept": n}
        for p, n in zip(prompts, fits, strict=True)
        if n < p.requests
    ]
    report.enforce()


def configured(dataset: dict, **workload) -> dict:
    config = copy.deepcopy(default_config())
    setter(["workloads", "c4", "dataset"], dataset)(config)
    for key, value in workload.items():
        setter(["workloads", "c4", key], value)(config)
    return validate_config(config)


def test_a_cell_carries_it_and_its_command_line_says_it(sharegpt):
    dataset = spec(sharegpt, max_turns=2, think_time_s=1.5)
    cell = next(c for c in build_cells(configured(dataset)) if c.workload == "c4")
    assert cell.workload_spec.dataset.to_dict() == {**dataset, "shuffle_seed": None}
    argv = client_argv(cell.workload_spec, "http://x:1", "out")
    assert "--conversations" in argv
    assert argv[argv.index("--max-turns") + 1] == "2"
    assert argv[argv.index("--think-time-s") + 1] == "1.5"


@pytest.mark.parametrize(
    "dataset,workload,expected",
    [
        ({"kind": "humaneval", "conversations": True}, {}, "'conversations'"),
        ({"kind": "jsonl", "path": "p.jsonl", "conversations": True}, {}, "'conversations'"),
        ({"kind": "sharegpt", "max_turns": 2}, {}, "conversations"),
        ({"kind": "sharegpt", "conversations": True}, {"endpoint": "completions"}, "endpoint"),
        ({"kind": "sharegpt", "conversations": True, "think_time_s": -1}, {}, "think_time_s"),
    ],
    ids=["humaneval", "jsonl", "max_turns alone", "completions", "negative think time"],
)
def test_bad_conversations_are_refused_naming_the_key(dataset, workload, expected):
    with pytest.raises(ConfigError) as error:
        build_cells(configured(dataset, **workload))
    message = str(error.value)
    assert "workloads.c4" in message and expected in message, message


@pytest.mark.parametrize(
    "dataset,expected",
    [
        ({"max_turns": 3, "think_time_s": 60}, "60 s x 2 gaps between turns (max_turns 3) = 120 s"),
        ({"max_turns": 4, "think_time_s": 40}, "40 s x 3 gaps between turns (max_turns 4) = 120 s"),
        ({"think_time_s": 150}, "150 s x 1 gap between turns (max_turns unset: at least two"),
    ],
    ids=["at the cap", "past the cap", "max_turns unset"],
)
def test_a_think_time_the_cap_cannot_hold_is_refused_at_plan_time(sharegpt, dataset, expected):
    """c4's `max_seconds` is 120: a conversation's think time alone, (max_turns - 1) x
    think_time_s (one gap with max_turns unset), at or past it could never send its last
    turn. The refusal names both keys and the figures; just under the cap, or one turn (no
    think time), is planned."""
    with pytest.raises(ConfigError) as error:
        configured(spec(sharegpt, **dataset))
    message = str(error.value)
    assert "'workloads.c4.dataset.think_time_s'" in message, message
    assert expected in message and "workloads.c4.max_seconds (120 s)" in message, message
    for fits in ({"max_turns": 3, "think_time_s": 59.5}, {"max_turns": 1, "think_time_s": 500}):
        cells = build_cells(configured(spec(sharegpt, **fits)))
        assert any(c.workload == "c4" for c in cells)


@pytest.mark.parametrize(
    "flags",
    [
        ["--dataset", "random", "--conversations"],
        ["--conversations", "--endpoint", "completions"],
        ["--max-turns", "2"],
        ["--conversations", "--max-turns", "3", "--think-time-s", "5", "--max-seconds", "10"],
    ],
    ids=["not sharegpt", "completions", "max-turns alone", "think time past the cap"],
)
def test_the_cli_refuses_bad_conversations_before_anything_runs(flags, sharegpt, tmp_path):
    """No server listens at the URL: a refusal must come before any request."""
    out = tmp_path / "run"
    args = ["--base-url", "http://127.0.0.1:9", "--dataset-path", str(sharegpt), *flags]
    proc = run_cli(
        *args, *["--num-prompts", "2", "--concurrency", "1", "--max-tokens", "4"], "--out", str(out)
    )
    assert proc.returncode == 2, proc.stderr
    assert "--conversations" in proc.stderr or "--max-turns" in proc.stderr
    assert not (out / "metrics.json").exists()
