"""The client's process count: chosen from the expected chunk rate unless asked for, capped by
the usable cores; and what the load cost, read while every load process still lives, in the
CLI's metrics.json. Against the real pacing server of benchmarks/ (no stand-in)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest

from tests.support.outputs import REPO
from workflow_scripts.loadgen import processes as lp
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.fan_out import FanOut, LoadProcessDied
from workflow_scripts.loadgen.prompts import Prompt
from workflow_scripts.process.machine_use import client_use, process_cpu_s, take_snapshot

PROMPTS = [Prompt(i, f"req-{i} tell me about the sea") for i in range(16)]


def test_processes_follow_the_expected_chunk_rate_unless_asked():
    per_process = lp.CHUNKS_PER_S_PER_PROCESS / lp.EXPECTED_CHUNKS_PER_S_PER_STREAM  # streams
    assert lp.choose_processes(32, cores=16).processes == max(1, -(-32 // int(per_process)))
    big = lp.choose_processes(256, cores=16)
    assert big.source == lp.AUTO
    assert big.expected_chunks_per_s == 256 * lp.EXPECTED_CHUNKS_PER_S_PER_STREAM
    assert big.processes == -(-256 // int(per_process)) and big.processes > 1
    assert lp.choose_processes(256, cores=1).processes == 1  # never more than the cores
    assert lp.choose_processes(2, cores=16).processes == 1
    assert lp.choose_processes(10_000, cores=4).processes == 4
    asked = lp.choose_processes(256, asked=3, cores=1)
    assert (asked.processes, asked.source) == (3, lp.SET)
    with pytest.raises(ValueError):
        lp.choose_processes(4, asked=0)
    assert asked.to_dict()["processes_source"] == "set"


def test_usable_cores_is_the_affinity_not_the_machine():
    """Real: a child pinned to one core sees one usable core (as under taskset or Slurm)."""
    code = "from workflow_scripts.loadgen.processes import usable_cores; print(usable_cores())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        preexec_fn=lambda: os.sched_setaffinity(0, {0}),
        check=True,
    )
    assert out.stdout.strip() == "1"


@pytest.fixture(scope="module")
def pacing_server():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, str(REPO / "benchmarks" / "pacing_server.py"), "--port", str(port),
         "--chunks-per-s", "200"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/health", timeout=2).read()
            break
        except OSError:
            time.sleep(0.1)
    yield url, server.pid
    server.terminate()
    server.wait()


def test_the_measured_end_is_read_before_the_load_processes_are_reaped(pacing_server):
    """Real: two load processes; the end hook sees both, each with CPU time of its own, and
    the client's figures add up (the tree's CPU covers its busiest process)."""
    url, server_pid = pacing_server
    snapshots = []

    def snapshot() -> None:
        snapshots.append(take_snapshot([server_pid]))

    # 160 tokens a request: each process's CPU several ticks (10 ms) above nothing, on any CPU
    spec = LoadSettings(base_url=url, concurrency=8, max_tokens=160, warmup_requests=1, processes=2)
    options = RunOptions(progress=False, on_measure_start=snapshot, on_measure_end=snapshot)
    load = run_load(spec, PROMPTS, options)
    assert sum(r.status == "ok" for r in load.records if not r.warmup) == len(PROMPTS)
    assert load.processes.processes == 2 and load.processes.source == lp.SET
    start, end = snapshots
    workers = [p for p in end.client if p.pid != os.getpid()]
    assert len(workers) >= 2  # both load processes (and multiprocessing's resource tracker)
    busy = [s for s in process_cpu_s(start.client, end.client) if s > 0.01]
    assert len(busy) >= 2
    use = client_use(start, end, load.processes.to_dict())
    assert use["processes"] == 2 and use["tree_processes"] == len(end.client)
    assert 0 < use["max_process_percent_of_core"] <= use["cpu_percent_of_core"] + 1e-9
    assert all(p.pid != server_pid for p in end.client)


def test_cli_records_the_process_choice_and_the_clients_cpu(pacing_server, tmp_path):
    """Real: the CLI without --processes chooses (one process at concurrency 4), with
    --processes 2 takes it; metrics.json's `client` says which and what it cost."""
    url, _ = pacing_server
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p.text}) + "\n" for p in PROMPTS))
    results = {}
    for name, extra in (("auto", []), ("two", ["--processes", "2"])):
        argv = [sys.executable, "-m", "workflow_scripts.loadgen", "--base-url", url,
                "--dataset", "jsonl", "--dataset-path", str(prompts), "--num-prompts", "16",
                "--concurrency", "4", "--max-tokens", "30", "--no-progress",
                "--out", str(tmp_path / name), *extra]  # fmt: skip
        subprocess.run(argv, cwd=REPO, check=True, capture_output=True, timeout=120)
        results[name] = json.loads((tmp_path / name / "metrics.json").read_text())
    auto, two = results["auto"]["client"], results["two"]["client"]
    assert (auto["processes"], auto["processes_source"]) == (1, "auto")
    assert auto["expected_chunks_per_s"] == 4 * lp.EXPECTED_CHUNKS_PER_S_PER_STREAM
    assert results["auto"]["load"]["processes"] is None  # asked: nothing
    assert (two["processes"], two["processes_source"]) == (2, "set")
    assert two["tree_processes"] >= 3 and auto["tree_processes"] == 1
    for client in (auto, two):
        assert client["cpu_percent_of_core"] > 0 and client["bench_s"] > 0
        assert client["limited"] == (
            client["max_process_percent_of_core"] >= client["limit_percent_of_core"]
        )


# What Snakemake's `script:` runs: a temporary copy of the entry script below its preamble, which
# defines `snakemake` and points `__file__` back at the entry script (Snakemake 9.27).
ENTRY_SCRIPT = """\
import json
sm = snakemake  # noqa: F821  (injected by the preamble, as Snakemake does)
from workflow_scripts.loadgen.client import LoadSettings, RunOptions, run_load
from workflow_scripts.loadgen.prompts import Prompt
spec = LoadSettings(
    base_url=sm["url"], concurrency=4, max_tokens=20, warmup_requests=0, processes=2
)
prompts = [Prompt(i, f"req-{i} tell me about the sea") for i in range(16)]
load = run_load(spec, prompts, RunOptions(progress=False))
print(json.dumps({"ok": sum(r.status == "ok" for r in load.records),
                  "processes": load.processes.processes}))
"""


@pytest.mark.standin
def test_load_processes_start_under_a_main_script_that_runs_only_below_a_preamble(
    pacing_server, tmp_path
):
    """STAND-IN for Snakemake's `script:` (its preamble and `__file__` as it writes them): the
    parent's `__main__` is a script a child cannot re-run (`snakemake` is undefined without the
    preamble); the load still fans out over two processes and measures every prompt."""
    url, _ = pacing_server
    entry = tmp_path / "entry.py"
    entry.write_text(ENTRY_SCRIPT)
    preamble = textwrap.dedent(f"""\
        import sys; sys.path.extend([{str(REPO)!r}]); snakemake = {{"url": {url!r}}}
        __real_file__ = __file__; __file__ = {str(entry)!r}
        """)
    runner = tmp_path / "tmp_entry.py"
    runner.write_text(preamble + ENTRY_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(runner)], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == {"ok": len(PROMPTS), "processes": 2}


@pytest.mark.parametrize("killed", ["before the start time reached it", "during the load"])
def test_a_load_process_that_dies_is_named_with_how_it_ended(pacing_server, killed):
    """Real: the second of two load processes is SIGKILLed once ready (and reaped) or mid-load;
    the client fails at once, naming that process, when and the signal (not a bare EOFError or
    BrokenPipeError), and ends the other one."""
    url, _ = pacing_server
    spec = LoadSettings(
        base_url=url, concurrency=4, max_tokens=4000, warmup_requests=0, processes=2
    )
    fan = FanOut(spec, PROMPTS, 2)

    async def load() -> None:
        await fan.ready()
        victim = fan.procs[1]
        if killed.startswith("before"):
            os.kill(victim.pid, signal.SIGKILL)
            victim.join()
        run = asyncio.ensure_future(fan.run(time.perf_counter(), lambda record: None))
        if killed.startswith("during"):
            await asyncio.sleep(0.5)
            os.kill(victim.pid, signal.SIGKILL)
        with pytest.raises(LoadProcessDied) as died:
            await asyncio.wait_for(run, timeout=15)  # not after the other one's 20 s load
        message = str(died.value)
        assert f"load process 2 of 2 (pid {victim.pid}) ended {killed}" in message
        assert message.endswith("killed by SIGKILL")

    fan.start()
    try:
        asyncio.run(load())
    finally:
        fan.close()
    assert all(not proc.is_alive() for proc in fan.procs)
