"""SIGTERM to a Snakemake that is planning, and the results_dir lock, each on its own.

SIGTERM: Snakemake's REAL handler (`JobScheduler.exit_gracefully`) on a STAND-IN scheduler (a
namespace with the lock, the semaphore and the workflow the handler touches: a real scheduler
needs a whole DAG), in a child process so that a handler that never returns cannot hang the test.
The SIGTERM lands while the interrupted thread holds the scheduler's lock, as it does while the
scheduler finishes the jobs of a large dry run: before the fix the handler waited on that lock
for ever (a 1000-point `snakemake -n` hung this way).

The lock: its holder is a STAND-IN for another run (a `sleep` process named by the lock file)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.support.outputs import REPO
from workflow_scripts.process.leftovers import started

CHILD = textwrap.dedent(
    """
    import os, signal, threading, types
    try:
        from workflow_scripts.cell.interrupt import sigterm_never_waits_on_itself
        sigterm_never_waits_on_itself()
    except ImportError:
        pass
    from snakemake.scheduling.job_scheduler import JobScheduler

    stand_in = types.SimpleNamespace(
        _lock=threading.Lock(),
        _open_jobs=threading.Semaphore(0),
        _user_kill=None,
        workflow=types.SimpleNamespace(dryrun={dryrun}),
    )
    signal.signal(signal.SIGTERM, lambda *a: JobScheduler.exit_gracefully(stand_in, *a))
    held = {held}
    try:
        if held:
            with stand_in._lock:  # the scheduler finishing jobs
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(10**6):
                    pass
        else:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10**6):
                pass
    except KeyboardInterrupt:
        print("stopped as Ctrl-C")
    else:
        print("graceful:", stand_in._user_kill)
    """
)


def child(dryrun: bool, held: bool) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CHILD.format(dryrun=dryrun, held=held)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_sigterm_while_the_scheduler_holds_its_lock_stops_the_run_instead_of_waiting():
    try:
        proc = child(dryrun=False, held=True)
    except subprocess.TimeoutExpired:
        pytest.fail("the SIGTERM handler waited for ever on the lock its own thread held")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stopped as Ctrl-C"


def test_sigterm_to_a_dry_run_stops_it_at_once():
    """A dry run has no job to finish: Snakemake's graceful stop planned on to the end."""
    proc = child(dryrun=True, held=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stopped as Ctrl-C"


def test_sigterm_to_a_run_with_a_free_lock_keeps_snakemakes_graceful_stop():
    """What forward_sigterm_to_jobs relies on: the running cells are ended by the forwarded
    signal, and Snakemake removes their outputs."""
    proc = child(dryrun=False, held=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "graceful: graceful"


# --- the results_dir lock ----------------------------------------------------------------------


@pytest.fixture
def other_run():
    process = subprocess.Popen(["sleep", "300"])
    yield process
    process.kill()
    process.wait()


def lock_of(results, pid: int, workdir: str = "/elsewhere/other", start_ticks=None):
    from workflow_scripts.cell.results_dir import LOCK_NAME

    results.mkdir(parents=True, exist_ok=True)
    ticks = start_ticks if start_ticks is not None else started(pid).start_ticks
    holder = {"pid": pid, "host": socket.gethostname(), "workdir": workdir, "start_ticks": ticks}
    (results / LOCK_NAME).write_text(json.dumps(holder))
    return results / LOCK_NAME


def test_a_live_holder_is_refused_by_name_and_keeps_its_lock(tmp_path, other_run):
    from workflow_scripts.cell.results_dir import (
        ResultsDirLocked,
        acquire_results_lock,
        release_results_lock,
    )

    lock = lock_of(tmp_path / "results", other_run.pid)
    with pytest.raises(ResultsDirLocked) as refused:
        acquire_results_lock(tmp_path / "results", tmp_path)
    assert f"held by pid {other_run.pid}" in str(refused.value)
    assert "/elsewhere/other" in str(refused.value) and str(lock) in str(refused.value)
    assert not release_results_lock(tmp_path / "results")  # never another run's
    assert json.loads(lock.read_text())["pid"] == other_run.pid


def test_a_gone_holder_or_a_reused_pid_is_taken_over_and_released(tmp_path, other_run):
    from workflow_scripts.cell.results_dir import acquire_results_lock, release_results_lock

    results = tmp_path / "results"
    lock_of(results, other_run.pid, start_ticks=1)  # the pid now names another process
    lock = acquire_results_lock(results, tmp_path)
    mine = json.loads(lock.read_text())
    assert mine["pid"] == os.getpid() and mine["workdir"] == str(tmp_path.resolve())
    assert acquire_results_lock(results, tmp_path) == lock  # this process: held already
    assert release_results_lock(results) and not lock.exists()
    other_run.kill()
    other_run.wait()
    lock_of(results, other_run.pid, start_ticks=0)
    assert acquire_results_lock(results, tmp_path) == lock  # a run that is gone
    assert release_results_lock(results)


def test_a_parse_time_write_on_a_read_only_dir_is_skipped_with_a_line(tmp_path, capsys):
    from workflow_scripts.cell.results_dir import write_at_parse

    def refused(path):
        raise PermissionError(13, "Permission denied", str(path))

    assert not write_at_parse("the goal files", refused, tmp_path / "goals")
    said = capsys.readouterr().err
    assert "not written (the goal files)" in said and "Permission denied" in said

    def broken(path):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):  # any other failure is not a read-only dir: it stops the parse
        write_at_parse("the goal files", broken, tmp_path)
