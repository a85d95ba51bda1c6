"""Processes a run leaves behind when it is killed or interrupted twice, and what ends them.

- The record of what a cell's server started (process.leftovers): pure checks on hand-made
  records; then the REAL run_cell in a subprocess, SIGKILLed (as the out-of-memory killer
  does) while its server runs, and the next run of the cell ending what the first left: the
  server's worker (a native launch) or its container (docker). A pid whose start time does not
  match the record is never touched.
- A second Ctrl-C during teardown still ends the server's whole process group.

STAND-IN server (`fixtures/faults/forking_server.py`, launched as a `native` llamacpp engine or
as a stand-in docker image): it forks a worker, as vLLM and SGLang do, and on demand ignores
SIGTERM, which a real llama-server does not do on demand. Processes are found through what the
test launched (its process tree, the server's log), never machine-wide.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.support.engines import REPO, docker_calls, install_standin_docker, make_config
from workflow_scripts.process import leftovers
from workflow_scripts.process.leftovers import ProcStat, Record, Started
from workflow_scripts.process.ports import reserve_port

pytestmark = pytest.mark.standin

FORKING = REPO / "tests" / "fixtures" / "faults" / "forking_server.py"
BOOT = "boot-a"
RUNNER = Started(10, 5)  # the run that wrote a hand-made record


def stat(pid: int, start_ticks: int, state: str = "S", ppid: int = 1, pgid: int = 0) -> ProcStat:
    return ProcStat(pid, "server", state, ppid, pgid or pid, start_ticks)


def record(*processes: Started, boot: str = BOOT) -> Record:
    return Record(boot, RUNNER, processes, pgid=processes[0].pid if processes else None)


# -- pure: which recorded processes are still the ones recorded --------------------------------


def test_the_stat_line_is_read_past_a_command_name_with_spaces_and_parentheses():
    # fields 3-9, then 10-21 (counters, priority, threads), then 22: the start time
    text = "4242 (my (odd) name) S 1 4240 4240 0 -1 4194560 " + "0 " * 12 + "987654 9 1"
    parsed = leftovers.parse_stat(text)
    assert (parsed.pid, parsed.name, parsed.state, parsed.ppid, parsed.pgid) == (
        4242,
        "my (odd) name",
        "S",
        1,
        4240,
    )
    assert parsed.start_ticks == 987654
    mine = leftovers.read_stat(os.getpid())
    assert mine.pid == os.getpid() and mine.start_ticks == psutil_ticks(os.getpid())


def psutil_ticks(pid: int) -> int:
    """The start time in clock ticks after boot, as psutil computes it (a second opinion)."""
    boot_s = psutil.boot_time()
    return round((psutil.Process(pid).create_time() - boot_s) * os.sysconf("SC_CLK_TCK"))


def test_a_process_counts_as_recorded_only_with_its_pid_and_start_time():
    worker = Started(200, 7000)
    assert leftovers.still_running(worker, stat(200, 7000))
    assert not leftovers.still_running(worker, stat(200, 7001))  # the pid was reused
    assert not leftovers.still_running(worker, stat(200, 7000, state="Z"))  # a zombie
    assert not leftovers.still_running(worker, None)  # gone


def test_the_leftovers_are_the_recorded_processes_still_running_once_their_run_is_gone():
    a, b, c = Started(200, 7000), Started(201, 7010), Started(202, 7020)
    live = {200: stat(200, 7000), 201: stat(201, 9999), 10: stat(10, 6)}  # 202 is gone
    assert leftovers.leftovers(record(a, b, c), BOOT, live) == [a]  # 201 is someone else's now
    assert leftovers.leftovers(record(a), "boot-b", live) == []  # rebooted since: none is ours
    running_runner = {**live, 10: stat(10, 5)}
    assert leftovers.leftovers(record(a), BOOT, running_runner) == []  # its run still goes


def test_a_servers_processes_are_its_descendants_and_its_group():
    stats = [
        stat(100, 1, ppid=50),  # the server, leader of group 100
        stat(101, 2, ppid=100),  # its worker
        stat(102, 3, ppid=101, pgid=102),  # the worker's child, in a group of its own
        stat(103, 4, ppid=1, pgid=100),  # orphaned: its parent exited, it keeps the group
        stat(104, 5, ppid=103, pgid=104),  # ... and its child
        stat(105, 6, ppid=100, state="Z"),  # a zombie is nothing
        stat(300, 7, ppid=50),  # a sibling of the server: not its
    ]
    assert [s.pid for s in leftovers.members(100, stats)] == [100, 101, 102, 103, 104]


def test_a_record_reads_back_as_written(tmp_path):
    written = Record(BOOT, Started(10, 5), (Started(200, 7000),), pgid=200, container="llmbench-x")
    path = tmp_path / "cell.json"
    leftovers.write_record(path, written)
    assert leftovers.read_record(path) == written
    path.write_text("{torn")
    assert leftovers.read_record(path) is None and not path.exists()


# -- the edges on real processes of this test's own ----------------------------------------------


def sleeping() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])


@pytest.fixture
def sleeper():
    proc = sleeping()
    yield proc
    proc.kill()
    proc.wait()


def gone_runner() -> Started:
    """A runner that has exited (a process of ours, reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    me = leftovers.started(proc.pid)
    proc.wait()
    return me


def test_a_pid_whose_start_time_does_not_match_is_left_alone(sleeper, tmp_path):
    """The record's pid runs, but started at another time: a reused pid, someone else's."""
    live = leftovers.started(sleeper.pid)
    path = tmp_path / "cell.json"
    stale = Started(sleeper.pid, live.start_ticks - 1)
    leftovers.write_record(path, Record(leftovers.boot_id(), gone_runner(), (stale,)))
    assert leftovers.end_leftovers(path) is None
    time.sleep(0.2)
    assert sleeper.poll() is None  # untouched
    assert not path.exists()  # nothing it names runs: the record is done with


def test_what_a_still_running_run_started_is_left_alone(sleeper, tmp_path):
    path = tmp_path / "cell.json"
    runner = sleeping()  # another run of the cell, still going
    try:
        record = Record(
            leftovers.boot_id(), leftovers.started(runner.pid), (leftovers.started(sleeper.pid),)
        )
        leftovers.write_record(path, record)
        assert leftovers.end_leftovers(path) is None
        assert sleeper.poll() is None and path.exists()
    finally:
        runner.kill()
        runner.wait()


def test_a_launch_this_process_made_earlier_is_over(sleeper, tmp_path):
    """Two launches of one cell in one process (run_cell called twice): the first one's
    leftovers are ended by the second, though their runner, this process, still runs."""
    path = tmp_path / "cell.json"
    me = leftovers.started(os.getpid())
    leftovers.write_record(path, Record(leftovers.boot_id(), me, (leftovers.started(sleeper.pid),)))
    assert str(sleeper.pid) in leftovers.end_leftovers(path)
    assert sleeper.wait(timeout=5) == -signal.SIGKILL


def test_a_matching_leftover_is_ended_and_named(sleeper, tmp_path, capfd):
    path = tmp_path / "m__e__q__none__w.json"
    recorded = leftovers.started(sleeper.pid)
    leftovers.write_record(path, Record(leftovers.boot_id(), gone_runner(), (recorded,)))
    line = leftovers.end_leftovers(path)
    assert sleeper.wait(timeout=5) == -signal.SIGKILL
    assert line.startswith("m__e__q__none__w: ended what an earlier run of it left running: pid ")
    assert str(sleeper.pid) in line and line in capfd.readouterr().err
    assert not path.exists()


# -- the REAL run_cell, SIGKILLed, then run again -----------------------------------------------

RUN_CELL = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from tests.support.engines import one_cell
    from workflow_scripts.cell.run import CellInputs, run_cell
    config = json.loads(Path(sys.argv[1]).read_text())
    result = run_cell(CellInputs(
        cell=one_cell(config),
        out_dir=Path(sys.argv[2]),
        engine_info={},
        weights_manifest={"primary": sys.argv[3]},
    ))
    print("STATUS", result["status"], result["reason"], flush=True)
""")


def cell_config(tmp_path: Path, engine: dict, models: dict | None = None) -> Path:
    prompts = tmp_path / "prompts.jsonl"
    config = make_config(
        {"e": engine},
        [{"model": "m", "quant": "q", "engine": "e", "workload": "w"}],
        models=models,
        workload={
            "dataset": {"kind": "jsonl", "path": str(prompts)},
            "num_prompts": 2,
            "concurrency": 2,
            "warmup_requests": 0,
            "request_timeout_s": 120,
            "max_seconds": 120,
        },
        memory={"interval_s": 0.2, "baseline_samples": 1},
    )
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def set_prompts(tmp_path: Path, first_word: str) -> None:
    """`fault:hang` keeps the load in flight (the stand-in never answers); `ok` lets it end."""
    (tmp_path / "prompts.jsonl").write_text(
        "".join(json.dumps({"prompt": f"{first_word} {i}"}) + "\n" for i in range(2))
    )


def run_cell_argv(config: Path, out: Path, weights: str) -> list[str]:
    return [sys.executable, "-c", RUN_CELL, str(config), str(out), weights]


def kill_mid_load(argv: list[str]) -> list[psutil.Process]:
    """Start a cell's run, SIGKILL it once its server answers; the processes it had started."""
    runner = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.PIPE, text=True)
    tree: list[psutil.Process] = []
    try:
        for line in runner.stderr:
            if "server ready" in line:
                tree = psutil.Process(runner.pid).children(recursive=True)
                break
        assert tree, "the cell's server never became ready"
        runner.kill()
        runner.wait(timeout=10)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    return tree


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def settle(procs: list[psutil.Process], timeout_s: float = 5.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in procs if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def end_ours(procs: list[psutil.Process]) -> None:
    for proc in procs:
        if alive(proc):
            proc.kill()


def forked_pids(log: Path) -> list[int]:
    """The server and worker pids the stand-in wrote to its log."""
    found = re.search(r"server (\d+) forked worker (\d+)", log.read_text())
    return [int(found[1]), int(found[2])] if found else []


def test_the_next_run_ends_the_worker_a_killed_run_left(tmp_path):
    engine = {"kind": "llamacpp", "launch": "native", "binary": f"{sys.executable} {FORKING}"}
    config = cell_config(tmp_path, engine)
    out = tmp_path / "cells" / "m__e__q__none__w"
    argv = run_cell_argv(config, out, str(tmp_path / "m.gguf"))
    set_prompts(tmp_path, "fault:hang")
    tree = kill_mid_load(argv)
    try:
        server_pid, worker_pid = forked_pids(out / "server.log")
        (worker,) = [p for p in tree if p.pid == worker_pid]
        assert settle([p for p in tree if p.pid == server_pid]) == []  # PDEATHSIG: the server
        time.sleep(0.5)
        assert alive(worker), "the worker is what a killed run leaves"
        record = tmp_path / "cells" / ".running" / "m__e__q__none__w.json"
        assert worker_pid in [p["pid"] for p in json.loads(record.read_text())["processes"]]

        set_prompts(tmp_path, "ok")
        again = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert "STATUS done" in again.stdout, again.stdout + again.stderr
        (line,) = [ln for ln in again.stderr.splitlines() if "ended what an earlier run" in ln]
        assert line.startswith("m__e__q__none__w: ended what an earlier run of it left running")
        assert str(worker_pid) in line
        assert settle([worker]) == []
        assert not record.exists()  # the second run tore down cleanly
        second = forked_pids(out / "server.log")  # the second run's server and worker
        assert len(second) == 2 and settle([p for p in map(stand_in, second) if p]) == []
    finally:
        end_ours(tree)


def stand_in(pid: int) -> psutil.Process | None:
    """The live stand-in server process of that pid, if it still runs."""
    try:
        proc = psutil.Process(pid)
        return proc if alive(proc) and FORKING.name in " ".join(proc.cmdline()) else None
    except psutil.Error:
        return None


IMAGE = "example/forking-server:latest"


def test_the_next_run_removes_the_container_a_killed_run_left(tmp_path, monkeypatch):
    """Docker: the client dies with the killed run, the container (STAND-IN docker: a process
    in a session of its own, as a container is to its client) runs on."""
    state = install_standin_docker(
        tmp_path, monkeypatch, {IMAGE: {"entrypoint": [sys.executable, str(FORKING)], "id": "x"}}
    )
    engine = {
        "kind": "llamacpp",
        "launch": "docker",
        "docker": {"image": IMAGE},
        "settings": {"port": 8080},
    }
    weights = tmp_path / "models" / "m.gguf"
    weights.parent.mkdir()
    weights.write_bytes(b"GGUF")
    models = {"m": {"quants": {"q": {"weights": {"source": "local", "path": str(weights)}}}}}
    config = cell_config(tmp_path, engine, models)
    out = tmp_path / "cells" / "m__e__q__none__w"
    argv = run_cell_argv(config, out, str(weights))
    set_prompts(tmp_path, "fault:hang")
    tree = kill_mid_load(argv)
    try:
        name = "llmbench-m__e__q__none__w"
        container = json.loads((state / "containers" / f"{name}.json").read_text())
        (inside,) = [p for p in tree if p.pid == container["pid"]]
        time.sleep(0.5)
        assert alive(inside), "the container is what a killed run leaves"

        set_prompts(tmp_path, "ok")
        first_call = len(docker_calls(state))
        again = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert "STATUS done" in again.stdout, again.stdout + again.stderr
        (line,) = [ln for ln in again.stderr.splitlines() if "ended what an earlier run" in ln]
        assert f"container {name}" in line
        assert settle([inside]) == []
        calls = docker_calls(state)[first_call:]
        run_at = next(i for i, call in enumerate(calls) if call[0] == "run")
        assert calls[0][0] == "ps" and ["rm", "-f", name] in calls[:run_at]
    finally:
        end_ours(tree)


# -- a second Ctrl-C during teardown -------------------------------------------------------------

DRIVER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from workflow_scripts.process.server import ServerProcess, running, sigterm_raises, wait_ready
    argv, port, log = sys.argv[1:-2], sys.argv[-2], Path(sys.argv[-1])
    with sigterm_raises():
        with running(ServerProcess(argv, log)) as server:
            wait_ready(server, f"http://127.0.0.1:{port}", "/health", 60)
            print("READY", flush=True)
            time.sleep(120)
""")


def test_a_second_ctrl_c_during_teardown_still_kills_the_whole_group(tmp_path):
    """Ctrl-C, then Ctrl-C again while the teardown waits on a server that shrugs SIGTERM off:
    the wait is cut short, the group is SIGKILLed, and the interruption still ends the run."""
    log = tmp_path / "server.log"
    with reserve_port() as lease:
        argv = [sys.executable, str(FORKING), "--ignore-sigterm", "--port", str(lease.port)]
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, *argv, str(lease.port), str(log)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        tree: list[psutil.Process] = []
        try:
            assert driver.stdout.readline().strip() == "READY"
            tree = psutil.Process(driver.pid).children(recursive=True)
            assert len(tree) == 2  # the server and its worker
            driver.send_signal(signal.SIGINT)
            deadline = time.monotonic() + 10
            while "server" not in _shrugged(log) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert "server" in _shrugged(log), "the teardown never sent SIGTERM"
            sent = time.monotonic()
            driver.send_signal(signal.SIGINT)  # again, during the 10 s grace
            driver.wait(timeout=30)
            assert time.monotonic() - sent < 5  # the second Ctrl-C hurried the teardown
            assert "KeyboardInterrupt" in driver.stderr.read()  # and still ended the run
            assert settle(tree) == [], "a process of the server outlived its teardown"
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
            end_ours(tree)


def _shrugged(log: Path) -> str:
    text = log.read_text() if log.exists() else ""
    return " ".join(m[0] for m in re.finditer(r"(server|worker) \d+: SIGTERM ignored", text))


# -- an orphaned job: its Snakemake is gone, it runs on --------------------------------------------


def test_the_owner_of_a_job_is_its_nearest_snakemake_ancestor():
    bash, smk, shell = stat(30, 3), stat(20, 2), stat(10, 1)
    chain = [
        (bash, ["/bin/bash", "-c", "exec python -m workflow_scripts.entry.series_server"]),
        (smk, ["/venv/bin/python3", "/venv/bin/snakemake", "--cores", "1"]),
        (shell, ["-bash"]),
    ]
    assert leftovers.owner_in(chain) == Started(20, 2)
    assert leftovers.owner_in([(smk, ["python", "-m", "snakemake", "-s", "Snakefile"])]) == (
        Started(20, 2)
    )
    script = ["python", "/w/.snakemake/scripts/tmpab12.cell.py"]  # a job, not the program
    assert leftovers.owner_in([(bash, script), (shell, ["-bash"])]) is None


def test_a_runner_whose_snakemake_is_gone_is_an_orphan():
    owner = Started(20, 2)
    orphan = Record(BOOT, RUNNER, (Started(200, 7000),), pgid=200, owner=owner)
    live = {10: stat(10, 5), 200: stat(200, 7000)}  # the runner and its server; no Snakemake
    assert leftovers.orphaned(orphan, BOOT, live)
    assert not leftovers.runner_running(orphan, BOOT, live)
    assert leftovers.leftovers(orphan, BOOT, live) == [Started(200, 7000)]
    with_owner = {**live, 20: stat(20, 2)}
    assert not leftovers.orphaned(orphan, BOOT, with_owner)
    assert leftovers.leftovers(orphan, BOOT, with_owner) == []  # its run still goes
    reused = {**live, 20: stat(20, 99)}  # the pid now someone else's: the Snakemake is gone
    assert leftovers.orphaned(orphan, BOOT, reused)


ORPHAN_RUNNER = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    from workflow_scripts.process import leftovers
    server = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True
    )
    leftovers.write_record(Path(sys.argv[1]), leftovers.record_of(server.pid, None))
    time.sleep(300)
""")


def test_the_next_run_ends_an_orphaned_job_and_its_server(tmp_path):
    """A job (the runner) whose Snakemake was SIGKILLed runs on, with its server: the next run
    ends both rather than start a second server beside the first. STAND-IN Snakemake: a script
    named `snakemake` that starts the job and sleeps, as a Snakemake's process tree looks."""
    path = tmp_path / "series.json"
    fake = tmp_path / "snakemake"
    fake.write_text(
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {ORPHAN_RUNNER!r}, sys.argv[1]]).wait()\n"
    )
    owner = subprocess.Popen([sys.executable, str(fake), str(path)], cwd=REPO)
    procs: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 30
        while leftovers.read_record(path) is None:
            assert time.monotonic() < deadline, "the job never put its server on record"
            time.sleep(0.1)
        record = leftovers.read_record(path)
        procs = [psutil.Process(p) for p in (record.runner.pid, *(s.pid for s in record.processes))]
        assert record.owner == leftovers.started(owner.pid)
        assert leftovers.end_leftovers(path) is None  # its Snakemake runs: all is its own
        owner.kill()
        owner.wait()
        line = leftovers.end_leftovers(path)
        assert line is not None and f"pid {record.runner.pid} (" in line
        assert settle(procs) == []
        assert str(record.processes[0].pid) in line
    finally:
        owner.kill()
        owner.wait()
        end_ours(procs)
