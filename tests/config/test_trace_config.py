"""A replayed trace checked when the config is validated (workflow_scripts/config/traces.py), so
`plan` and `snakemake -n` refuse it before any server starts, naming the key and the file (and
the line): a file missing, not a regular file, over the size cap or not UTF-8, a window with no
request or too few, a schedule the time cap cuts, a request no cell's context can hold. The
traces are the fixtures (tests/fixtures/traces/) and copies edited here; the named pipe and
/dev/zero are real OS objects."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.models import SMOLLM2
from tests.support.pipeline import run_snakemake, tiny_config, write_config
from workflow_scripts.config import traces
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.loadgen.traces import MAX_TRACE_BYTES
from workflow_scripts.vocabulary import ConfigError

REPO = Path(__file__).resolve().parents[2]
MOONCAKE = REPO / "tests" / "fixtures" / "traces" / "mooncake.jsonl"
BURSTGPT = REPO / "tests" / "fixtures" / "traces" / "burstgpt.csv"
REPLAY = {
    "dataset": {"kind": "trace", "format": "mooncake", "path": str(MOONCAKE)},
    "num_prompts": 6,
    "concurrency": 2,
    "max_tokens": 32,
    "max_seconds": 60,
}
CELL = {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "replay"}
VLLM = {"kind": "vllm", "launch": "native", "binary": "vllm", "settings": {"max_model_len": 1024}}


def replaying(dataset: dict | None = None, **workload) -> dict:
    """A config of one cell (llama.cpp, ctx_size 8192) replaying the Mooncake fixture's first 6
        requests (its longest: 1100 + 12 tokens, the last due at 0.26 s), edited (None: a key
    dropped; `max_seconds` None: no cap)."""
    entry = copy.deepcopy(REPLAY)
    entry["dataset"].update(dataset or {})
    entry.update(workload)
    for key in [key for key, value in workload.items() if value is None and key != "max_seconds"]:
        del entry[key]
    return tiny_config([CELL], workloads={"replay": entry})


def refused(config: dict) -> str:
    with pytest.raises(ConfigError) as error:
        build_cells(validate_config(config))
    return str(error.value)


def mooncake_with(tmp_path: Path, line: int, **row) -> Path:
    """The Mooncake fixture with keys of its `line` (1-based) replaced."""
    lines = MOONCAKE.read_text().splitlines()
    lines[line - 1] = json.dumps({**json.loads(lines[line - 1]), **row})
    path = tmp_path / "edited.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_fixture_replay_plans():
    cells = build_cells(validate_config(replaying()))
    assert [c.id for c in cells] == ["smollm2-135m__llamacpp-cpu__q4_1__none__replay"]


def test_a_missing_path_a_folder_an_oversized_file_and_bad_bytes_name_the_key_and_file(tmp_path):
    missing = tmp_path / "none.jsonl"
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as handle:
        handle.truncate(MAX_TRACE_BYTES + 1)  # sparse: no byte of it is read
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(MOONCAKE.read_bytes().replace(b'"hash_ids": [4]', b'"hash_ids": [4], "\xe9"'))
    for path, said in (
        (missing, f"{missing}: no such file"),
        (tmp_path, f"{tmp_path}: a directory, not a regular file"),
        (huge, f"{huge}: {MAX_TRACE_BYTES + 1} bytes, over the 256 MiB a trace may have"),
        (latin, f"{latin}:3: not UTF-8 text (byte 0xe9)"),
    ):
        message = refused(replaying({"path": str(path)}))
        assert message.startswith(f"config key 'workloads.replay.dataset.path': {said}"), message


def test_a_malformed_line_is_refused_when_the_config_is_read_not_when_the_cell_starts(tmp_path):
    path = mooncake_with(tmp_path, 5, output_length=0)
    assert refused(replaying({"path": str(path)})) == (
        f"config key 'workloads.replay.dataset.path': {path}:5: `output_length` must be at "
        "least 1, got 0"
    )


def test_a_window_with_no_request_or_too_few_is_refused():
    assert refused(replaying({"start_s": 100})) == (
        f"config key 'workloads.replay.dataset': {MOONCAKE}: no request lies in the window "
        "[100 s, inf s); its requests lie in [0 s, 0.65 s]"
    )
    assert refused(replaying({"start_s": 0.4}, num_prompts=6)) == (
        f"config key 'workloads.replay.num_prompts': 6 prompts, and {MOONCAKE}'s window "
        "[0.4 s, inf s) holds 4 requests"
    )


def test_each_point_of_a_sweep_needs_its_prompts_in_the_window():
    """c2 replays 8 of the fixture's 12 requests, c4 would replay 16."""
    config = replaying(num_prompts_per_concurrency=4, num_prompts=None, concurrency=[2, 4])
    assert refused(config).startswith(
        "config key 'workloads.replay.num_prompts_per_concurrency': 16 prompts, and"
    )


def test_a_schedule_the_time_cap_cuts_is_refused_saying_its_length_and_the_cap():
    message = refused(replaying({"time_scale": 1000}))
    assert message == (
        f"config key 'workloads.replay.max_seconds': 60 s, and the schedule of the first 6 "
        f"requests of {MOONCAKE}'s window [0 s, inf s), times time_scale 1000, runs 260 s (its "
        "last due at line 6): what is due after the cap is never sent; raise max_seconds, or "
        "replay fewer requests, a shorter window or a smaller time_scale"
    )
    build_cells(validate_config(replaying({"time_scale": 1000}, max_seconds=261)))


def test_the_audits_schedule_of_1e300_times_1e9_is_refused_at_plan_time(tmp_path):
    """Timestamps of 1e300 with `time_scale: 1e9`: the server used to start, wait, and fail with
    "no request completed ({})". In ms (Mooncake) they make 1e306 s, past the cap; in s
    (BurstGPT) past any finite number."""
    path = mooncake_with(tmp_path, 12, timestamp=1e300)
    message = refused(replaying({"path": str(path), "time_scale": 1e9}, num_prompts=12))
    assert message.startswith("config key 'workloads.replay.max_seconds': 60 s, and the schedule")
    assert "runs 1e+306 s (its last due at line 12)" in message
    lines = BURSTGPT.read_text().splitlines()
    lines[12] = "1e300,ChatGPT,533,14,547,API log"
    csv = tmp_path / "far.csv"
    csv.write_text("\n".join(lines) + "\n")
    message = refused(replaying({"path": str(csv), "format": "burstgpt", "time_scale": 1e9}))
    assert message == (
        f"config key 'workloads.replay.dataset': {csv}:13: its time x time_scale 1e+09 is past "
        "any finite number of seconds; its requests lie in [5 s, 1e+300 s]"
    )


def test_a_replay_without_a_time_cap_may_run_a_day():
    message = refused(replaying({"time_scale": 1e6}, max_seconds=None))
    assert message.startswith("config key 'workloads.replay.max_seconds': absent, and the schedule")
    assert "runs 260000 s (its last due at line 6), past the 86400 s a replay may run" in message
    build_cells(validate_config(replaying({"time_scale": 3e5}, max_seconds=None)))  # 78,000 s


def test_an_output_length_no_context_holds_is_refused_naming_the_line(tmp_path):
    """The audit's typo: one output_length of 80000 (for 8) in a replay. The context guard used
    to drop that request at run time, and the cell read `done` with one request fewer."""
    path = mooncake_with(tmp_path, 2, output_length=80000)
    assert refused(replaying({"path": str(path)})) == (
        f"config key 'workloads.replay.dataset.path': {path}:2: input_length 700 + "
        "output_length 80000 tokens, past the 8192-token context of engine 'llamacpp-cpu' "
        "(ctx_size), which cell smollm2-135m__llamacpp-cpu__q4_1__none__replay (cells[0]) "
        "replays it on"
    )
    build_cells(validate_config(replaying({"path": str(path)}, num_prompts=1)))  # not replayed


def test_the_models_context_window_and_each_engines_own_setting_bound_a_request():
    config = replaying()
    config["models"]["smollm2-135m"] = {**SMOLLM2, "context_window": 1024}
    assert "past the 1024-token context of model 'smollm2-135m' (context_window)" in refused(config)
    config = replaying()
    config["engines"]["vllm-x"] = VLLM
    config["cells"] = [{**CELL, "engine": "vllm-x"}]
    message = refused(config)
    assert f"{MOONCAKE}:1: input_length 1100 + output_length 12 tokens, past the 1024-token " in (
        message
    )
    assert "context of engine 'vllm-x' (max_model_len)" in message


def test_a_context_the_guard_sizes_at_launch_bounds_nothing_at_plan_time():
    """`context_guard: size` sets llama.cpp's -c for the longest prompt at launch: the configured
    ctx_size is not what the server gets."""
    config = replaying()
    config["engines"]["llamacpp-cpu"]["settings"]["ctx_size"] = 1024
    assert "(ctx_size)" in refused(copy.deepcopy(config))
    config["context_guard"] = "size"
    build_cells(validate_config(config))


def test_a_trace_is_read_once_however_many_cells_replay_it(tmp_path, monkeypatch):
    """A sweep of 4 points on 2 engines; read again once the file changes."""
    path = tmp_path / "trace.jsonl"
    path.write_bytes(MOONCAKE.read_bytes())
    reads = []
    real = traces.read_trace
    monkeypatch.setattr(traces, "read_trace", lambda *a: reads.append(a) or real(*a))
    config = replaying({"path": str(path)}, num_prompts=None, concurrency=[1, 2, 3, 4])
    config["workloads"]["replay"]["num_prompts_per_concurrency"] = 2
    config["workloads"]["other"] = copy.deepcopy(config["workloads"]["replay"])
    config["engines"]["vllm-x"] = {**VLLM, "settings": {"max_model_len": 4096}}
    config["cells"].append({"matrix": {**{k: [v] for k, v in CELL.items()}, "engine": ["vllm-x"]}})
    config["cells"].append({**CELL, "workload": "other"})
    assert len(build_cells(validate_config(config))) == 12
    assert reads == [(path, "mooncake")]
    os.utime(path, ns=(1, 1))
    build_cells(validate_config(config))
    assert reads == [(path, "mooncake")] * 2


# -- through the commands: `plan` and `snakemake -n`, never a hang --------------------------------

# `plan` in a child bounded in memory (a regression reading /dev/zero fails there) and in time
# (one blocking on a named pipe is killed at the timeout).
BOUNDED = (
    "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
    "sys.argv = ['plan', '--configfile', sys.argv[1]]; "
    "runpy.run_module('workflow_scripts.plan', run_name='__main__')"
)


@pytest.mark.parametrize("kind", ["named pipe", "device"])
def test_plan_refuses_a_pipe_or_a_device_without_reading_it(tmp_path, kind):
    if kind == "named pipe":
        path = tmp_path / "trace.jsonl"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    config = write_config(tmp_path, replaying({"path": str(path)}))
    proc = subprocess.run(
        [sys.executable, "-c", BOUNDED, str(config)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"{config}: config key 'workloads.replay.dataset.path': {path}: a {kind}, not a "
        "regular file\n"
    )


def test_snakemake_dry_run_refuses_a_named_pipe_naming_the_key_and_file(tmp_path):
    pipe = tmp_path / "trace.jsonl"
    os.mkfifo(pipe)
    write_config(tmp_path, replaying({"path": str(pipe)}))
    proc = run_snakemake(tmp_path, "-n", timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert f"config key 'workloads.replay.dataset.path': {pipe}: a named pipe" in out, out
    assert "Traceback" not in out, out
    assert not (tmp_path / "results").exists()
