"""SIGTERM to the standalone client run with `--processes 2` (`kill PID`, `timeout`, a job
scheduler), or SIGKILL (the out-of-memory killer): its load processes end with it and close
their connections. STAND-IN server: it streams one token every 50 ms for minutes and counts its
open connections, which no real engine does on demand."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.support.engines import REPO

pytestmark = pytest.mark.standin


def wait_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_the_cli_ends_its_load_processes_and_their_connections(
    standin, tmp_path, signum
):
    open_streams: set[int] = set()

    async def endless_stream(reader, writer):
        await standin.read_request(reader)
        open_streams.add(id(writer))
        try:
            writer.write(standin.sse_head())
            while True:
                writer.write(standin.event(standin.content("tok")))
                await writer.drain()  # raises once the client's end is closed
                await asyncio.sleep(0.05)
        finally:
            open_streams.discard(id(writer))

    url = standin.start(endless_stream)
    cli = subprocess.Popen(
        [sys.executable, "-m", "workflow_scripts.loadgen", "--base-url", url,
         "--dataset", "random", "--input-len", "4", "--num-prompts", "8",
         "--concurrency", "2", "--processes", "2", "--warmup-requests", "0",
         "--max-seconds", "600", "--max-tokens", "100000", "--model", "m",
         "--no-progress", "--out", str(tmp_path / "run")],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    tree: list[psutil.Process] = []
    try:
        assert wait_for(lambda: len(open_streams) == 2, 60), "the two streams never opened"
        tree = psutil.Process(cli.pid).children(recursive=True)
        assert len(tree) >= 2  # the load processes (and multiprocessing's resource tracker)
        cli.send_signal(signum)
        cli.wait(timeout=30)
        left = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert wait_for(lambda: not [p for p in left if _alive(p)], 10), (
            f"load processes outlived the client: {[p.pid for p in left if _alive(p)]}"
        )
        assert wait_for(lambda: not open_streams, 10), "the server still streams to the client"
        assert not (tmp_path / "run" / "metrics.json").exists()  # an interrupted run is no result
    finally:
        if cli.poll() is None:
            cli.kill()
        for proc in tree:  # only what this test started
            if _alive(proc):
                proc.kill()
        cli.wait()


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
