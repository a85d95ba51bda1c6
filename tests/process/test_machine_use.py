"""Who used the machine during the bench (workflow_scripts.process.machine_use): the arithmetic on
hand-made snapshots and memory samples, then real processes — a busy loop outside the server's
and client's trees must count as other work and flag the cell, the same loop inside the server's
or the client's tree must be charged there, and memory taken outside both trees must show while
the server's own growth does not. The machine running the tests is busy with other work, so the
real-process tests compare against what the spinning processes themselves used, never against
an assumed quiet machine."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil
import pytest

from tests.fixtures.contract.make_contract import HERE as CONTRACT_DIR
from tests.fixtures.contract.make_contract import structure
from workflow_scripts.config.schema import load_schema
from workflow_scripts.process import machine_use as mu
from workflow_scripts.process.memory import KIB_PER_GIB, MemorySample, MemorySampler

GIB_KIB = KIB_PER_GIB


def proc(pid, own, reaped=0.0, started=1.0):
    return mu.ProcessCpu(pid, started, own, reaped)


def snap(t, busy, server=(), client=()):
    return mu.UseSnapshot(t, busy, tuple(server), tuple(client))


# --- arithmetic ---------------------------------------------------------------------------


def test_a_worker_reaped_during_the_window_counts_only_its_time_inside_it():
    start = [proc(10, 1.0, reaped=0.5), proc(11, 2.0)]  # 11: a worker, 2 s before the start
    end = [proc(10, 1.5, reaped=0.5 + 5.0)]  # 11 ended with 5 s in all and was reaped by 10
    assert mu.tree_cpu_s(start, end) == pytest.approx(0.5 + 3.0)
    born = [proc(10, 1.5), proc(12, 0.7, started=9.0)]  # 12 began inside the window
    assert sorted(mu.process_cpu_s(start, born)) == pytest.approx([0.5, 0.7])
    reused = [proc(11, 0.3, started=7.0)]  # pid 11 again, but another process
    assert mu.process_cpu_s(start, reused) == pytest.approx([0.3])


def test_client_use_flags_a_process_near_a_full_core():
    start = snap(0.0, 0.0, client=[proc(1, 0.0), proc(2, 0.0, started=2.0)])
    busy = snap(10.0, 0.0, client=[proc(1, 1.0), proc(2, 9.0, started=2.0)])
    use = mu.client_use(start, busy, {"processes": 1, "processes_source": "auto"})
    assert use["cpu_percent_of_core"] == pytest.approx(100.0)
    assert use["max_process_percent_of_core"] == pytest.approx(90.0)
    assert use["limited"] and use["tree_processes"] == 2 and use["processes"] == 1
    assert "90 % of a core" in mu.client_note(use)
    calm = snap(10.0, 0.0, client=[proc(1, 4.0), proc(2, 4.0, started=2.0)])
    relaxed = mu.client_use(start, calm, thresholds=mu.Thresholds(95.0, 25.0, 0.5))
    assert not relaxed["limited"] and relaxed["limit_percent_of_core"] == 95.0
    assert mu.client_note(relaxed) == ""


def bench(t, avail_gib, server_gib=None, client_gib=None, phase="bench"):
    kib = lambda g: None if g is None else int(g * GIB_KIB)  # noqa: E731
    return MemorySample(t, phase, kib(avail_gib), kib(server_gib), None, kib(client_gib))


def test_interference_is_what_neither_tree_explains():
    start = snap(0.0, 100.0, server=[proc(5, 50.0)], client=[proc(1, 3.0)])
    end = snap(4.0, 106.0, server=[proc(5, 53.0)], client=[proc(1, 3.4)])
    samples = [
        bench(0.0, 10.0, 2.0, 0.1, phase="warmup"),  # before the bench: not counted
        bench(0.5, 10.0, 2.0, 0.1),
        bench(1.0, 8.0, 3.5, 0.2),  # 2 GiB used: 1.5 by the server, 0.1 by the client
        bench(1.5, 9.0, 2.5, 0.2),
    ]
    found = mu.interference(start, end, samples)
    assert found["machine_cpu_percent_of_core"] == pytest.approx(150.0)
    assert found["server_cpu_percent_of_core"] == pytest.approx(75.0)
    assert found["client_cpu_percent_of_core"] == pytest.approx(10.0)
    assert found["other_cpu_percent_of_core"] == pytest.approx(65.0)
    assert found["other_mem_rise_gib"] == pytest.approx(0.4, abs=1e-6)
    assert found["flagged"]
    assert (
        mu.interference_note(found) == "other processes used 65 % of a core of CPU during the bench"
    )
    quiet_end = snap(4.0, 103.6, server=[proc(5, 53.0)], client=[proc(1, 3.4)])
    quiet = mu.interference(start, quiet_end, samples[:2])
    assert quiet["other_cpu_percent_of_core"] == pytest.approx(5.0)
    assert quiet["other_mem_rise_gib"] == 0.0
    assert not quiet["flagged"] and mu.interference_note(quiet) == ""
    memory_only = mu.interference(start, quiet_end, [bench(0, 10.0, 2.0), bench(1, 9.0, 2.0)])
    assert memory_only["flagged"] and "1.00 GiB more memory" in mu.interference_note(memory_only)
    assert mu.other_mem_rise_gib([bench(0, 10.0, phase="warmup")]) is None


def test_thresholds_default_to_the_schemas():
    schema = load_schema()["properties"]["checks"]["properties"]
    assert mu.Thresholds() == mu.Thresholds(**{k: v["default"] for k, v in schema.items()})
    assert mu.Thresholds.from_config({"other_mem_rise_gib": 2}).other_mem_rise_gib == 2.0
    assert mu.Thresholds.from_config(None) == mu.Thresholds()


def test_thresholds_stay_out_of_the_cells_settings():
    """Editing `checks:` changes what is flagged, never what a cell measures: its settings (the
    cell rule's params) are the same with and without, and a misspelt key is refused."""
    from tests.support.pipeline import tiny_config
    from workflow_scripts.config.matrix import build_cells, validate_config
    from workflow_scripts.vocabulary import ConfigError

    plain = tiny_config([{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"}])
    strict = {**plain, "checks": {"other_cpu_percent_of_core": 5, "other_mem_rise_gib": 0.1}}
    cells = [build_cells(validate_config(c))[0].to_dict() for c in (plain, strict)]
    assert cells[0] == cells[1]
    assert validate_config(strict)["checks"]["client_process_percent_of_core"] == 85
    with pytest.raises(ConfigError, match="checks"):
        validate_config({**plain, "checks": {"other_cpu_pct": 5}})


# --- real processes -----------------------------------------------------------------------

SPIN = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end:\n    pass\n"
SLEEP = "import time\ntime.sleep(120)\n"
# a client stand-in whose one child spins
SPINNING_CHILD = (
    "import subprocess, sys, time\n"
    f"kid = subprocess.Popen([sys.executable, '-c', {SPIN!r}])\n"
    "time.sleep(120)\n"
)
WINDOW_S = 2.0


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []

    def spawn(code: str) -> subprocess.Popen:
        started.append(subprocess.Popen([sys.executable, "-c", code]))
        return started[-1]

    yield spawn
    for p in started:
        for child in psutil.Process(p.pid).children(recursive=True):
            child.kill()
        p.kill()
        p.wait()


def own_cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def settle(*pids: int) -> None:
    """Wait until each process (and its children) has started running its code."""
    deadline = time.monotonic() + 20
    for pid in pids:
        while time.monotonic() < deadline:
            p = psutil.Process(pid)
            if [c for c in [p, *p.children(recursive=True)] if c.cpu_times().user > 0.05]:
                break
            time.sleep(0.05)


def wait_for_children(pid: int, count: int) -> None:
    """Wait until the process has started `count` children (its own start-up CPU can pass
    settle()'s bar before it has forked)."""
    deadline = time.monotonic() + 20
    while len(psutil.Process(pid).children()) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_busy_loop_outside_both_trees_flags_the_cell(processes):
    """Real: a spinning server, an idle client and a spinning outsider (neither tree): the
    server's spin is the server's, the outsider's is other work, and it is flagged."""
    server, client, outsider = processes(SPIN), processes(SLEEP), processes(SPIN)
    settle(server.pid, outsider.pid)
    before = {p.pid: own_cpu_s(p.pid) for p in (server, outsider)}
    start = mu.take_snapshot([server.pid], client.pid)
    time.sleep(WINDOW_S)
    end = mu.take_snapshot([server.pid], client.pid)
    spent = {pid: own_cpu_s(pid) - cpu for pid, cpu in before.items()}
    wall = end.t_s - start.t_s
    # the outsider's share of a core alone crosses a threshold at half of it (how much of a core
    # it got depends on what else this machine runs)
    share = 100 * spent[outsider.pid] / wall
    found = mu.interference(start, end, thresholds=mu.Thresholds(85.0, share / 2, 0.5))
    server_s = found["server_cpu_percent_of_core"] * wall / 100
    other_s = found["other_cpu_percent_of_core"] * wall / 100
    assert server_s == pytest.approx(spent[server.pid], rel=0.1, abs=0.05)
    assert found["client_cpu_percent_of_core"] < 5
    assert other_s >= 0.9 * spent[outsider.pid] - 0.05  # the outsider is in "other", whole
    assert found["flagged"]
    assert "% of a core of CPU" in mu.interference_note(found)


def test_a_busy_loop_inside_the_server_or_client_tree_is_not_other_work(processes):
    """Real: the same spin as the server, and as a child of the client: charged to each tree, so
    other work is the machine's busy time less exactly those (whatever else the machine ran)."""
    server, client = processes(SPIN), processes(SPINNING_CHILD)
    wait_for_children(client.pid, 1)
    settle(server.pid, client.pid)
    (kid,) = psutil.Process(client.pid).children()
    before = {pid: own_cpu_s(pid) for pid in (server.pid, kid.pid)}
    start = mu.take_snapshot([server.pid], client.pid)
    time.sleep(WINDOW_S)
    end = mu.take_snapshot([server.pid], client.pid)
    spent = {pid: own_cpu_s(pid) - cpu for pid, cpu in before.items()}
    wall = end.t_s - start.t_s
    found = mu.interference(start, end)
    use = mu.client_use(start, end)
    seconds = {k: found[k] * wall / 100 for k in found if k.endswith("percent_of_core")}
    assert seconds["server_cpu_percent_of_core"] == pytest.approx(spent[server.pid], rel=0.1)
    assert seconds["client_cpu_percent_of_core"] == pytest.approx(spent[kid.pid], rel=0.1)
    machine, other = seconds["machine_cpu_percent_of_core"], seconds["other_cpu_percent_of_core"]
    assert other <= machine - 0.9 * (spent[server.pid] + spent[kid.pid]) + 0.05
    # the client's busiest process is the spinning child, and the flag follows its share
    assert use["tree_processes"] == 2
    busiest = use["max_process_percent_of_core"]
    assert busiest == pytest.approx(100 * spent[kid.pid] / wall, rel=0.1)
    assert use["limited"] == (busiest >= mu.Thresholds().client_process_percent_of_core)


def test_the_client_tree_leaves_out_the_server_it_launched(processes):
    """Real: this process launches a spinning server, as a cell does; the client's tree is this
    process without it."""
    server = processes(SPIN)
    settle(server.pid)
    before = own_cpu_s(server.pid)
    start = mu.take_snapshot([server.pid])
    time.sleep(0.5)
    end = mu.take_snapshot([server.pid])
    spent = own_cpu_s(server.pid) - before
    me = psutil.Process()
    others = {c.pid for c in me.children(recursive=True)} - {server.pid}  # e.g. earlier tests'
    assert {p.pid for p in end.client} == {me.pid} | others
    assert [p.pid for p in end.server] == [server.pid]
    assert mu.tree_cpu_s(start.server, end.server) == pytest.approx(spent, rel=0.1, abs=0.03)
    assert mu.tree_cpu_s(start.client, end.client) < 0.5 * spent


ALLOCATE = (
    "import sys, time\n"
    "time.sleep(float(sys.argv[1]))\n"
    "block = b'x' * (768 << 20)\n"  # 0.75 GiB, every page written
    "time.sleep(120)\n"
)


def test_memory_taken_outside_both_trees_is_other_and_the_servers_is_not():
    """Real: after the bench starts, the server and an outsider each take 0.75 GiB; the sampler
    sees the server's in its RSS, so only the outsider's counts as other memory. Other jobs on
    this machine move MemAvailable too (a few hundred MB in a second), hence the margins."""
    started = []
    try:
        server = subprocess.Popen([sys.executable, "-c", ALLOCATE, "0.5"])
        outsider = subprocess.Popen([sys.executable, "-c", ALLOCATE, "0.5"])
        started += [server, outsider]
        sampler = MemorySampler(interval_s=0.1)
        sampler.server_pid = server.pid
        sampler.watch_client(psutil.Process().pid, exclude=[server.pid, outsider.pid])
        sampler.start()
        sampler.set_phase("bench")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rss = [psutil.Process(p.pid).memory_info().rss for p in started]
            if min(rss) > 0.7 * 2**30:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        sampler.stop()
    finally:
        for p in started:
            p.kill()
            p.wait()
    bench = [s for s in sampler.samples if s.phase == "bench"]
    server_rise = (bench[-1].server_rss_kib - bench[0].server_rss_kib) / GIB_KIB
    assert server_rise > 0.7
    other = mu.other_mem_rise_gib(sampler.samples)
    assert other >= 0.4  # the outsider's 0.75 GiB
    used_peak = max(bench[0].mem_available_kib - s.mem_available_kib for s in bench) / GIB_KIB
    assert other <= used_peak - 0.6  # the server's 0.75 GiB is not in it
    nothing = mu.UseSnapshot(0, 0, (), ())
    found = mu.interference(nothing, nothing, bench, mu.Thresholds(85.0, 25.0, 0.35))
    assert found["flagged"] and "GiB more memory" in mu.interference_note(found)


def test_a_real_cell_records_its_client_and_what_else_ran(tmp_path):
    """Real: a llama-server cell (the built engine, SmolLM2). Its metrics.json carries the client
    (one process at concurrency 2, chosen by itself) and the interference figures; the server's
    decoding is charged to the server, memory.csv samples the client's RSS."""
    from tests.support.pipeline import tiny_config, tiny_workload
    from workflow_scripts.cell.run import CellInputs, run_cell
    from workflow_scripts.config.matrix import build_cells, validate_config
    from workflow_scripts.engines.provision import provision
    from workflow_scripts.weights.fetch import fetch_weights

    config = tiny_config(
        [{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"}],
        workloads={"tiny": tiny_workload(num_prompts=6, max_tokens=48, concurrency=2,
                                         ignore_eos=True)},
    )  # fmt: skip
    (cell,) = build_cells(validate_config(config))
    manifest = fetch_weights(cell.weights, tmp_path / "weights.json")
    inputs = CellInputs(cell, tmp_path / "cell", provision(cell.engine, cell.engine_spec), manifest)
    result = run_cell(inputs)
    assert result["status"] == "done", result.get("reason")
    client, other = result["client"], result["interference"]
    assert (client["processes"], client["processes_source"]) == (1, "auto")
    assert client["tree_processes"] >= 1 and 0 < client["cpu_percent_of_core"] < 100
    assert other["server_cpu_percent_of_core"] > 30  # llama-server decoding, on its own tree
    pieces = sum(other[k] for k in ("server_cpu_percent_of_core", "client_cpu_percent_of_core"))
    assert other["other_cpu_percent_of_core"] == pytest.approx(
        max(0.0, other["machine_cpu_percent_of_core"] - pieces), abs=1e-6
    )
    assert other["flagged"] == (
        other["other_cpu_percent_of_core"] >= 25 or other["other_mem_rise_gib"] >= 0.5
    )
    assert client["bench_s"] == pytest.approx(other["bench_s"])
    assert client["bench_s"] <= result["duration_s"] + 2.0
    on_disk = json.loads((tmp_path / "cell" / "metrics.json").read_text())
    assert on_disk["client"] == client and on_disk["interference"] == other
    # metrics.json keeps the keys and nesting recorded before the restructuring (issue #17)
    contract = json.loads((CONTRACT_DIR / "contract.json").read_text())["metrics_json"]
    assert structure(on_disk) == contract
    rows = (tmp_path / "cell" / "memory.csv").read_text().splitlines()
    header = rows[0].split(",")
    client = header.index("client_rss_kib")
    assert client == 5  # memory.csv's columns keep their places; new ones are appended
    bench = [r.split(",") for r in rows[1:] if r.split(",")[1] == "bench"]
    assert bench and all(int(r[client]) > 10_000 for r in bench)  # this process: tens of MB
