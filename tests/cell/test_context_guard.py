"""The per-slot context guard against a REAL llama-server with a tiny slot: counts match the
server's own `usage`, the prompts it drops are exactly the ones the server would refuse, `fail`
stops the cell, and `size` grows -c until every prompt fits."""

from __future__ import annotations

import pytest
import requests

from tests.support.engines import (
    left_behind,
    llama_server_binary,
    make_config,
    one_cell,
    smollm2_gguf,
)
from workflow_scripts.cell.context_guard import ContextGuardError, guard_prompts, size_before_launch
from workflow_scripts.engines import adapter_for
from workflow_scripts.engines.command import cell_server_command, cell_weights
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.process.ports import reserve_port
from workflow_scripts.process.server import ServerProcess, running, wait_ready

pytestmark = pytest.mark.slow

MAX_TOKENS = 32
# word counts from far inside a 256-token slot to far beyond it
PROMPTS = [Prompt(i, " ".join(["river stone cloud"] * n)) for i, n in enumerate((2, 40, 75, 120))]


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("weights")
    link = folder / "smollm2-guard.gguf"
    link.symlink_to(smollm2_gguf(folder))
    return str(link)


def guard_cell(gguf: str, policy: str, ctx_size: int = 512, concurrency: int = 2):
    engine = {
        "kind": "llamacpp",
        "launch": "native",
        "binary": llama_server_binary(),
        "settings": {"ctx_size": ctx_size, "threads": 1},
    }
    models = {"m": {"quants": {"q": {"weights": {"source": "local", "path": gguf}}}}}
    return one_cell(
        make_config(
            {"llama": engine},
            [{"model": "m", "engine": "llama", "workload": "w"}],
            models=models,
            workload={"max_tokens": MAX_TOKENS, "concurrency": concurrency},
            context_guard=policy,
        )
    )


class Served:
    def __init__(self, cell, log_path):
        self.cell, self.log_path = cell, log_path

    def __enter__(self):
        adapter = adapter_for("llamacpp")
        self.lease = reserve_port()
        weights, _ = cell_weights(self.cell, {"primary": self.cell.weights["path"]}, None)
        self.command = cell_server_command(self.cell, adapter, {}, weights, None, self.lease.port)
        self.server = ServerProcess.for_command(self.command, self.log_path)
        self.running = running(self.server)
        self.running.__enter__()
        wait_ready(self.server, self.command.base_url, "/health", 60)
        return self.command.base_url

    def __exit__(self, *exc):
        self.running.__exit__(*exc)
        self.lease.release()


def test_skip_drops_exactly_what_the_server_would_refuse(gguf, tmp_path):
    cell = guard_cell(gguf, "skip")
    adapter = adapter_for("llamacpp")
    with Served(cell, tmp_path / "server.log") as url:
        kept, report = guard_prompts(cell, adapter, url, PROMPTS)
        assert report.per_slot_context == 256  # -c 512 over 2 slots, as /props says
        counts = {p.index: adapter.count_prompt_tokens(url, p.text, "chat") for p in PROMPTS}
        expected_skips = [i for i, n in counts.items() if n + MAX_TOKENS > 256]
        assert [s["index"] for s in report.skipped] == expected_skips
        assert expected_skips and len(expected_skips) < len(PROMPTS)  # the set-up bites
        assert any(n >= 256 for n in counts.values())  # one the server itself refuses
        assert [p.index for p in kept] == [i for i in counts if i not in expected_skips]
        assert report.longest_prompt_tokens == max(counts.values())
        report.enforce()  # skip: some prompts are left, so the cell goes on
        for prompt in PROMPTS:
            resp = requests.post(
                url + "/v1/chat/completions",
                timeout=60,
                json={"messages": [{"role": "user", "content": prompt.text}], "max_tokens": 1},
            )
            if counts[prompt.index] >= 256:
                assert resp.status_code == 400  # what the seeds saw as errors
            else:
                assert resp.status_code == 200
                assert resp.json()["usage"]["prompt_tokens"] == counts[prompt.index]
    assert left_behind(gguf) == []


def test_a_trace_request_needs_room_for_its_own_answer(gguf, tmp_path):
    """A trace's prompt carries its own max_tokens (its output length): the guard keeps room
    for that answer, not the workload's."""
    cell = guard_cell(gguf, "skip")
    adapter = adapter_for("llamacpp")
    short = PROMPTS[0]
    own = [Prompt(0, short.text, max_tokens=8), Prompt(1, short.text, max_tokens=250)]
    with Served(cell, tmp_path / "server.log") as url:
        count = adapter.count_prompt_tokens(url, short.text, "chat")
        assert count + MAX_TOKENS <= 256 < count + 250  # only its own answer cannot fit
        kept, report = guard_prompts(cell, adapter, url, own)
    assert [p.index for p in kept] == [0]
    assert report.skipped == [{"index": 1, "prompt_tokens": count}]


def test_fail_stops_the_cell_before_load(gguf, tmp_path):
    cell = guard_cell(gguf, "fail")
    with Served(cell, tmp_path / "server.log") as url:
        kept, report = guard_prompts(cell, adapter_for("llamacpp"), url, PROMPTS)
    assert report.skipped and len(kept) == len(PROMPTS)
    with pytest.raises(ContextGuardError, match=r"do not fit the per-slot context of 256"):
        report.enforce()
    assert report.to_dict()["policy"] == "fail"


def test_size_grows_the_context_until_every_prompt_fits(gguf, tmp_path):
    cell = guard_cell(gguf, "size")
    adapter = adapter_for("llamacpp")
    sized, record = size_before_launch(
        cell, adapter, {}, {"primary": gguf}, PROMPTS, tmp_path / "sizing.log"
    )
    assert "--no-warmup" in record["command"] and "-ngl" in record["command"]
    needed = record["needed_per_slot_tokens"]
    assert needed == record["longest_prompt_tokens"] + MAX_TOKENS
    assert sized.engine_spec["settings"]["ctx_size"] >= 2 * needed
    assert adapter.per_slot_context(sized) >= needed
    with Served(sized, tmp_path / "server.log") as url:
        kept, report = guard_prompts(sized, adapter, url, PROMPTS, record)
    assert report.skipped == [] and len(kept) == len(PROMPTS)
    assert report.per_slot_context >= needed
    assert left_behind(gguf) == []


def test_engines_without_slots_report_null_and_drop_nothing():
    engine = {
        "kind": "vllm",
        "launch": "native",
        "binary": "vllm serve",
        "settings": {"max_model_len": 64},
    }
    cell = one_cell(
        make_config(
            {"v": engine}, [{"model": "m", "engine": "v", "workload": "w"}], context_guard="fail"
        )
    )
    kept, report = guard_prompts(cell, adapter_for("vllm"), "http://127.0.0.1:9", PROMPTS)
    assert report.per_slot_context is None and kept == PROMPTS
    report.enforce()
    assert size_before_launch(cell, adapter_for("vllm"), {}, {}, PROMPTS, None) == (cell, None)


@pytest.mark.parametrize("policy", ["fail", "size"])
def test_run_cell_applies_the_policy(gguf, tmp_path, policy):
    """Through run_cell on a real dataset slice: `fail` fails before any request is sent, `size`
    relaunches nothing and runs every prompt on a sized context; both record the guard."""
    import json

    from workflow_scripts.cell.run import CellInputs, run_cell

    engine = {
        "kind": "llamacpp",
        "launch": "native",
        "binary": llama_server_binary(),
        "settings": {"ctx_size": 512, "threads": 1},
    }
    models = {"m": {"quants": {"q": {"weights": {"source": "local", "path": gguf}}}}}
    cell = one_cell(
        make_config(
            {"llama": engine},
            [{"model": "m", "engine": "llama", "workload": "w"}],
            models=models,
            workload={
                "dataset": {"kind": "random", "input_len": 300},
                "num_prompts": 2,
                "concurrency": 2,
                "max_tokens": 4,
                "warmup_requests": 0,
            },
            context_guard=policy,
            memory={"interval_s": 0.2, "baseline_samples": 1},
        )
    )
    out = tmp_path / "cell"
    result = run_cell(
        CellInputs(cell=cell, out_dir=out, engine_info={}, weights_manifest={"primary": gguf})
    )
    guard = json.loads((out / "metrics.json").read_text())["context_guard"]
    assert guard["policy"] == policy and guard["checked"] == 2
    if policy == "fail":
        assert result["status"] == "failed" and "ContextGuardError" in result["reason"]
        assert len(guard["skipped"]) == 2
        assert (out / "requests.jsonl").read_text() == ""  # nothing was sent
    else:
        assert result["status"] == "done", result.get("reason")
        assert guard["skipped"] == [] and guard["sizing"]["settings"]["ctx_size"] > 512
        assert result["completed"] == 2
        assert result["server_command"][result["server_command"].index("-c") + 1] == str(
            guard["sizing"]["settings"]["ctx_size"]
        )
    assert left_behind(gguf) == []
