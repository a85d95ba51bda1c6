"""Each request's answer text lands in requests.jsonl (`output`) beside its `finish_reason`,
through real sockets, for the chat and the completions endpoint, streamed; `record_outputs`
false (the workload, LoadSettings, the CLI's `--no-record-outputs`) keeps it null; the schema
refuses a `record_outputs` that is not a boolean, naming the key.

The server is a STAND-IN (tests/conftest.py's `standin`): its answer to each prompt is a text
made from the prompt, split into several chunks, with a reasoning chunk first (which is not the
answer), so a record holding another request's text, a piece too few or the reasoning fails."""

from __future__ import annotations

import json

import pytest

from tests.support.pipeline import tiny_config, tiny_workload
from tests.support.refusals import names_key
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.config.schema import check_schema
from workflow_scripts.loadgen.__main__ import main, parse_args
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.command import client_argv
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.loadgen.records import OK, read_records
from workflow_scripts.vocabulary import ConfigError

pytestmark = pytest.mark.standin

PROMPTS = [Prompt(i, f"question {i} about the sea") for i in range(5)]
REASONING = "let me think"


def pieces(prompt: str) -> list[str]:
    """The stand-in's answer to `prompt`, as the chunks it streams: the prompt's words reversed,
    one a chunk, and a tail with a quote, a newline and a non-ASCII letter JSON must carry."""
    return [f" {word}" for word in reversed(prompt.split())] + [' "é"\n']


def finish_of(chat: bool) -> str:
    return "stop" if chat else "length"


@pytest.fixture
def answering_server(standin):
    """Stand-in: answers each chat or completions request with `pieces(prompt)` streamed, a
    reasoning chunk before them (chat), a finish_reason, usage and [DONE]."""

    async def handler(reader, writer):
        while True:
            _, path, _, raw = await standin.read_request(reader)
            body = json.loads(raw)
            chat = path.endswith("/chat/completions")
            prompt = body["messages"][-1]["content"] if chat else body["prompt"]
            texts = pieces(prompt)
            if chat:
                reasoning = {"delta": {"reasoning_content": REASONING}, "finish_reason": None}
                chunks = [{"choices": [{"index": 0, **reasoning}]}]
                chunks += [standin.content(text) for text in texts]
                end = {"index": 0, "delta": {}, "finish_reason": finish_of(True)}
            else:
                chunks = [
                    {"choices": [{"index": 0, "text": text, "finish_reason": None}]}
                    for text in texts
                ]
                end = {"index": 0, "text": "", "finish_reason": finish_of(False)}
            out = b"".join(standin.event(c) for c in [*chunks, {"choices": [end]}])
            out += standin.event(standin.usage(5, len(texts))) + standin.event(b"[DONE]")
            writer.write(standin.sse_head() + out + standin.chunk(b""))
            await writer.drain()

    return standin.start(handler)


def measured(url: str, **kw) -> list:
    spec = LoadSettings(base_url=url, concurrency=2, max_tokens=8, warmup_requests=1, **kw)
    load = run_load(spec, PROMPTS, RunOptions(progress=False))
    records = [r for r in load.records if not r.warmup]
    assert [r.status for r in records] == [OK] * len(PROMPTS)
    return records


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_each_record_keeps_its_own_answer_and_finish_reason(answering_server, endpoint):
    """The concatenated `content` (chat) or `text` (completions) deltas, the reasoning left out;
    the chunk times still count the reasoning chunk, as TTFT always has."""
    records = measured(answering_server, endpoint=endpoint)
    for record in records:
        prompt = PROMPTS[record.prompt_index].text
        assert record.output == "".join(pieces(prompt)), record
        assert REASONING not in record.output
        assert record.finish_reason == finish_of(endpoint == "chat")
        chunks = len(pieces(prompt)) + (endpoint == "chat")
        assert record.content_chunks == chunks
    assert len({r.output for r in records}) == len(PROMPTS)


def test_record_outputs_false_keeps_every_output_null(answering_server):
    """The same answers, nothing of their text kept; the rest of the record as before."""
    records = measured(answering_server, record_outputs=False)
    assert all(r.output is None for r in records)
    assert all(r.finish_reason == "stop" and r.completion_tokens for r in records)


def test_the_cli_keeps_outputs_unless_told_not_to(answering_server, tmp_path):
    """`python -m workflow_scripts.loadgen` (in this process): requests.jsonl carries `output`
    by default and null with `--no-record-outputs`, which metrics.json's `load` says."""
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": p.text}) + "\n" for p in PROMPTS))
    base = ["--base-url", answering_server, "--dataset", "jsonl", "--dataset-path", str(dataset)]
    base += ["--num-prompts", str(len(PROMPTS)), "--concurrency", "2", "--max-tokens", "8"]
    for flags, kept in (([], True), (["--no-record-outputs"], False)):
        out = tmp_path / f"run-{kept}"
        assert main([*base, *flags, "--out", str(out)]) == 0
        records = [r for r in read_records(out / "requests.jsonl") if not r.warmup]
        assert len(records) == len(PROMPTS)
        for record in records:
            expected = "".join(pieces(PROMPTS[record.prompt_index].text)) if kept else None
            assert record.output == expected
        assert json.loads((out / "metrics.json").read_text())["load"]["record_outputs"] is kept


def config_of(**workload) -> dict:
    cells = [{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "w"}]
    return tiny_config(cells, workloads={"w": tiny_workload(**workload)})


@pytest.mark.parametrize("value", [True, False])
def test_a_cells_workload_carries_record_outputs_to_its_load_and_command(value):
    """The validated workload -> the cell's Workload -> the LoadSettings the cell runs with, and
    the command a card prints parses back to the same choice; absent, the schema says true."""
    from workflow_scripts.cell.run import load_settings_for

    (cell,) = build_cells(validate_config(config_of(record_outputs=value)))
    assert cell.workload_spec.record_outputs is value
    assert cell.workload_spec.to_dict()["record_outputs"] is value
    assert load_settings_for(cell, "http://127.0.0.1:1", None).record_outputs is value
    argv = client_argv(cell.workload_spec, "http://127.0.0.1:1", "out")
    assert parse_args(argv[3:]).record_outputs is value
    (default,) = build_cells(validate_config(config_of()))
    assert default.workload_spec.record_outputs is True


@pytest.mark.parametrize("bad", ["no", 0, None, [True]])
def test_the_schema_refuses_a_record_outputs_that_is_not_a_boolean(bad):
    with pytest.raises(ConfigError) as error:
        check_schema(config_of(record_outputs=bad))
    assert names_key(str(error.value), "workloads.w.record_outputs"), str(error.value)
