"""One server start for the points of a sweep's series (docs/sweeps.md).

The series' server is a Snakemake service job (rules/cells.smk `series_server`): it takes the
memory baseline, starts the server, waits until it answers, then puts it on record in
`results/cells/.series/<series>.json` and keeps it running until Snakemake ends it once the last
point is done. Each point stays its own job with its own outputs: it waits for that record, takes
its turn (the points of a series run one at a time, in their configured order), measures, and
hands the server to the next.

Why a placeholder record: Snakemake removes a service output once its group ends, and a point
whose (ancient) server input is missing would be rerun with every new point. The Snakefile
writes a placeholder for each series at parse time, so adding a point, or retrying a failed one,
runs that point alone (and a server for it).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from base64 import urlsafe_b64encode
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..atomic import write_json, write_text_if_changed
from ..process.leftovers import is_running
from ..process.server import ServerError
from ..text import tail
from ..vocabulary import Cell

SERIES_DIR = ".series"  # beside the cells' folders, like `.running`
NOT_STARTED = "not started"  # the placeholder's state
POLL_S = 0.2


def series_dir(cells_dir: str | Path) -> Path:
    return Path(cells_dir) / SERIES_DIR


def record_path(cells_dir: str | Path, series: str) -> Path:
    """The service output of a series' server job: its record once the server answers."""
    return series_dir(cells_dir) / f"{series}.json"


def launch_path(cells_dir: str | Path, series: str) -> Path:
    """The cell a series' server is started for, as the server job reads it."""
    return series_dir(cells_dir) / f"{series}.launch.json"


def write_series_files(cells_dir: str | Path, launches: Mapping[str, Mapping[str, Any]]) -> None:
    """At parse time, for each series (name -> its launch cell's dict): a record where there is
    none (see the module's docstring), and the launch cell where it changed.

    The server job takes its cell from this file, not from a param or its command line, so that
    it never has a reason of its own to run (nor a record older than its inputs, which would be
    one): Snakemake 9.27 does not look at a service's consumers one by one once the service
    has one (a changed param), and then never plans a new point of the series. It runs when,
    and only when, a point needs it."""
    for name, cell in launches.items():
        path = record_path(cells_dir, name)
        if not path.exists():
            write_json(path, {"state": NOT_STARTED, "series": name})
        # never older than the server's inputs: Snakemake would see them as updated and give
        # the server job a reason of its own to run, with the same effect as a changed param
        os.utime(path)
        write_text_if_changed(launch_path(cells_dir, name), json.dumps(cell, sort_keys=True))


def forget_provenance(workdir: str | Path, records: Iterable[str]) -> None:
    """At parse time: drop what Snakemake keeps of the series' server jobs (their metadata and
    incomplete markers under `.snakemake/`, file persistence, keyed as Snakemake 9.27 keys
    them). The record is a service's output, rewritten every run: what an earlier run (an
    earlier version of the rule, a killed run) left of it would give the job a reason of its
    own to run, and then Snakemake plans no point of the series (write_series_files)."""
    state = Path(workdir) / ".snakemake"
    for record in records:
        key = urlsafe_b64encode(record.encode()).decode()
        if len(key) >= 255:  # Snakemake splits such names into folders: too rare to follow
            continue
        for kind in ("metadata", "incomplete"):
            (state / kind / key).unlink(missing_ok=True)


def read_record(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"state": NOT_STARTED}


def alive(pid: int | None) -> bool:
    """A series' server or job runs: a zombie (dead, not yet reaped by the job) does not."""
    return is_running(pid)


# How long a point waits for the server job to put its server's death on record (it looks
# twice a second) before it says what it can without the job.
DEATH_RECORD_S = 5.0


def gone_reason(path: Path, record: Mapping[str, Any]) -> str:
    """Why the server of `record` (a `ready` record) no longer answers: the server job's own
    account (how its server exited, its last log lines), which the job writes within moments of
    the death; without one (the job is gone too), the server's last log lines."""
    start_id = record.get("start_id")
    deadline = time.monotonic() + DEATH_RECORD_S
    while True:
        now = read_record(path)
        if now.get("start_id") == start_id and now.get("state") in ("died", "failed"):
            return f"the series' server ({start_id}): {now.get('reason') or 'it is gone'}"
        if not alive(record.get("job_pid")) or time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    job = "its job is gone too" if not alive(record.get("job_pid")) else "its job said nothing"
    log = Path(record["log"]) if record.get("log") else None
    lines = tail(log) if log is not None and log.exists() else "(no log)"
    return (
        f"the series' server ({start_id}): server (pid {record.get('pid')}) is gone ({job}); "
        f"last log lines:\n{lines}"
    )


def wait_for_server(path: Path, timeout_s: float) -> dict[str, Any]:
    """The series' record once its server answers. Fails as soon as the server job says its
    server failed or died, the server is gone, or the job itself is gone, and at the timeout;
    a server's death fails every point with one reason (gone_reason)."""
    deadline = time.monotonic() + timeout_s
    while True:
        record = read_record(path)
        state = record.get("state")
        if state == "ready" and alive(record.get("pid")):
            return record
        if state == "ready":
            raise ServerError(gone_reason(path, record))
        if state in ("failed", "died"):
            reason = record.get("reason") or "the server is gone"
            raise ServerError(f"the series' server ({record.get('start_id')}): {reason}")
        if state == "starting" and not alive(record.get("job_pid")):
            raise ServerError("the series' server job ended before its server answered")
        if time.monotonic() > deadline:
            raise ServerError(
                f"the series' server did not answer within {timeout_s:.0f} s (state: {state})"
            )
        time.sleep(POLL_S)


@dataclass(frozen=True)
class Turn:
    """A point's turn on its series' server: its position among the points that ran on that
    server start (1 = the first)."""

    position: int


def _locked(path: Path) -> bool:
    """Whether another process holds the lock on `path` (a point still waiting or running)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def queued_points(cells_dir: str | Path, series: str) -> int:
    """How many points of the series are queued or running now (their jobs hold their locks)."""
    queue = series_dir(cells_dir) / f"{series}.queue"
    if not queue.is_dir():
        return 0
    return sum(_locked(entry) for entry in queue.iterdir() if entry.name.startswith("point-"))


def wait_for_a_point(cells_dir: str | Path, series: str, timeout_s: float) -> bool:
    """Whether a point of the series queued within `timeout_s`. A series' server job runs only
    for its points; one that finds none is a service Snakemake scheduled alone (after a killed
    run, or a change to the rule), which it would never end: it must end by itself."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if queued_points(cells_dir, series):
            return True
        time.sleep(POLL_S)
    return False


@contextmanager
def registered(cells_dir: str | Path, point: Cell) -> Iterator[None]:
    """Put the point in its series' queue for as long as its job runs: a lock on its own file
    (named by its load: the points take their turns lightest first) that the kernel drops when
    the job ends however it ends."""
    queue = series_dir(cells_dir) / f"{point.sweep.series}.queue"
    queue.mkdir(parents=True, exist_ok=True)
    fd = os.open(queue / f"point-{point.sweep.value:g}", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# The points of one run start together (Snakemake starts a service's consumers at once), but a
# Python process takes a second or two to register on a busy machine: no point takes the first
# turn before this long after its server answered, so an earlier point is queued by then.
SETTLE_S = 3.0


@contextmanager
def turn(cells_dir: str | Path, point: Cell, record: dict[str, Any]) -> Iterator[Turn]:
    """Wait until no lighter point of the series is still queued, then hold
    the series' server alone; a point queued later waits only for the one running."""
    queue = series_dir(cells_dir) / f"{point.sweep.series}.queue"
    start_id = record["start_id"]
    time.sleep(max(0.0, record.get("ready_at", 0) + SETTLE_S - time.time()))
    while any(
        _locked(entry)
        for entry in queue.iterdir()
        if entry.name.startswith("point-") and float(entry.name[6:]) < point.sweep.value
    ):
        time.sleep(POLL_S)
    lock_fd = os.open(queue / "server.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        counts_path = queue / "positions.json"
        counts = read_record(counts_path) if counts_path.exists() else {}
        position = int(counts.get(start_id, 0)) + 1
        write_json(counts_path, {start_id: position})  # only the current start matters
        yield Turn(position)
    finally:
        os.close(lock_fd)
