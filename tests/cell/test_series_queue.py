"""The queue a series' points take turns in (cell.series), with real file locks: lighter points
first, one at a time, and a server job that finds no point ends by itself. A series' server that
is gone (a zombie counts as gone) fails every point that comes to it, naming its death."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.sweeps import point_cell
from workflow_scripts.atomic import write_json
from workflow_scripts.cell import series
from workflow_scripts.cell.run import CellInputs, run_cell
from workflow_scripts.cell.shared import SharedServer
from workflow_scripts.process import leftovers
from workflow_scripts.process.server import ServerError
from workflow_scripts.vocabulary import DatasetSettings, Status


def record(start_id: str = "s@1") -> dict:
    return {"start_id": start_id, "ready_at": 0.0}


def test_a_heavier_point_waits_for_a_lighter_one_still_queued(tmp_path):
    light, heavy = point_cell(False, 1), point_cell(False, 4)
    order: list[str] = []
    with series.registered(tmp_path, light):
        assert series.queued_points(tmp_path, light.sweep.series) == 1

        def heavy_point():
            with series.registered(tmp_path, heavy), series.turn(tmp_path, heavy, record()) as t:
                order.append(f"heavy {t.position}")

        thread = threading.Thread(target=heavy_point)
        thread.start()
        time.sleep(1.0)
        assert order == []  # the lighter point is still queued: the heavier one waits
        with series.turn(tmp_path, light, record()) as t:
            order.append(f"light {t.position}")
    thread.join(timeout=10)
    assert order == ["light 1", "heavy 2"]
    assert series.queued_points(tmp_path, light.sweep.series) == 0


def test_positions_count_from_one_on_each_server_start(tmp_path):
    point = point_cell(False, 2)
    with series.registered(tmp_path, point), series.turn(tmp_path, point, record("a")) as t:
        assert t.position == 1
    with series.registered(tmp_path, point), series.turn(tmp_path, point, record("b")) as t:
        assert t.position == 1  # a new start counts anew


def test_a_server_job_with_no_point_gives_up(tmp_path):
    point = point_cell(False, 2)
    start = time.monotonic()
    assert not series.wait_for_a_point(tmp_path, point.sweep.series, timeout_s=0.5)
    assert time.monotonic() - start >= 0.5
    with series.registered(tmp_path, point):
        assert series.wait_for_a_point(tmp_path, point.sweep.series, timeout_s=0.5)


# -- a series' server that is gone: a zombie is dead, and every point names the death -----------


def zombie() -> subprocess.Popen:
    """A child that has exited and that nobody has reaped yet: `os.kill(pid, 0)` still passes."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while (leftovers.read_stat(proc.pid) or leftovers.ProcStat(0, "", "Z", 0, 0, 0)).state != "Z":
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.02)
    return proc


def test_a_zombie_server_pid_is_not_alive():
    proc = zombie()
    try:
        os.kill(proc.pid, 0)  # the old check: a zombie passes it
        assert not series.alive(proc.pid)
        assert not leftovers.is_running(proc.pid)
        assert series.alive(os.getpid()) and leftovers.is_running(os.getpid())
    finally:
        proc.wait()
    assert not series.alive(proc.pid)


def ready_record(tmp_path: Path, server_pid: int, job_pid: int) -> Path:
    log = tmp_path / "series.log"
    log.write_text("law stand-in listening\nlast words of the server\n")
    path = tmp_path / "series.json"
    write_json(
        path,
        {
            "series": "s",
            "start_id": "s@1#7",
            "job_pid": job_pid,
            "state": "ready",
            "pid": server_pid,
            "memory_pid": server_pid,
            "base_url": f"http://127.0.0.1:{free_port()}",
            "served_model": None,
            "ready_s": 1.0,
            "ready_at": 0.0,
            "started_at": "2026-01-01T00:00:00Z",
            "launch_cell": "s-c2",
            "server_version": None,
            "container_image_id": None,
            "server_command": ["law-server"],
            "server_env": {},
            "sizing": None,
            "baseline": [],
            "log": str(log),
        },
    )
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_point_waits_for_the_jobs_account_of_its_servers_death(tmp_path):
    """The server is a zombie (dead, its job has not looked yet); the job, alive, puts the death
    on record a moment later: the point fails with the job's account, exit status and log."""
    proc = zombie()
    try:
        path = ready_record(tmp_path, proc.pid, os.getpid())
        died = {**series.read_record(path), "state": "died", "reason": "server was killed by X"}
        timer = threading.Timer(0.5, write_json, (path, died))
        timer.start()
        with pytest.raises(ServerError) as caught:
            series.wait_for_server(path, timeout_s=5)
        timer.join()
        assert str(caught.value) == "the series' server (s@1#7): server was killed by X"
    finally:
        proc.wait()


@pytest.mark.standin
def test_a_point_that_starts_after_its_server_died_fails_naming_the_death(tmp_path):
    """The REAL run_cell of a point on a series' record whose server is a zombie and whose job is
    gone too (nothing will say more): failed, naming the server's death and its last log lines,
    never the ConnectionError its first request to the dead address would give. STAND-IN: no
    server at all (a child that exited), since only the record and the pid are read."""
    proc, job = zombie(), subprocess.Popen([sys.executable, "-c", "pass"])
    job.wait()
    try:
        path = ready_record(tmp_path, proc.pid, job.pid)
        data = tmp_path / "prompts.jsonl"
        data.write_text("".join(json.dumps({"prompt": f"p {i}"}) + "\n" for i in range(4)))
        cell = point_cell(False, 2)
        spec = dataclasses.replace(
            cell.workload_spec,
            dataset=DatasetSettings(kind="jsonl", path=str(data)),
            num_prompts=4,
            warmup_requests=0,
        )
        cell = dataclasses.replace(cell, workload_spec=spec)
        out = tmp_path / "cells" / cell.id
        inputs = CellInputs(cell, out, {}, {"primary": "w.gguf"}, series_record=path)
        result = run_cell(inputs, SharedServer)
    finally:
        proc.wait()
    assert result["status"] == Status.FAILED
    assert result["reason"].startswith("ServerError: the series' server (s@1#7): server (pid ")
    assert (
        "its job is gone too" in result["reason"] and "last words of the server" in result["reason"]
    )
    assert "ConnectionError" not in result["reason"]
