"""A series' one server start: the service job that runs it (`serve_series`) and a point's run on
it (`SharedServer`, the `serving` of run_cell). The queue and the record are cell.series's.

What a point reports stays its own: its memory is MemAvailable against the baseline the server
job took before the launch, sampled from the point's turn to its end; its energy is read over its
own bench window against the idle draw the server job read across that baseline (the record's
`energy`); its server.log is the part of the series' log written during its turn; its
metrics.json names the server start (`server_start`: id, position, pid) it ran on.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..atomic import write_json
from ..engines import adapter_for
from ..engines.base import EngineAdapter
from ..loadgen.prompts import Dataset
from ..process.auth import engine_api_key, server_api_key
from ..process.leftovers import end_leftovers, is_running, owner_of
from ..process.memory import MemorySample
from ..process.server import ServerError, sigterm_raises
from ..redact import redact
from ..terminal import say
from ..vocabulary import Cell, CellMetrics
from . import series
from .attempts import BenchWindow
from .energy import Meter, attached_meter, idle_across, meter_for
from .run import (
    CellInputs,
    Ready,
    check_inputs,
    load_prompts,
    plan_launch,
    running_record,
    start_and_wait,
)
from .sampling import memory_sampler

# How long a point waits for its series' server beyond the engine's own readiness timeout (the
# server job takes the memory baseline first, and the context guard may size it).
ATTACH_MARGIN_S = 300.0
# How long the server job waits for a first point to queue before it ends unused: Snakemake
# starts a service's consumers with it, and a point queues within seconds of its start.
NO_POINT_S = 120.0
OWNER_POLL_S = 0.5  # how often the server job looks for the Snakemake it is a job of


@dataclass(frozen=True)
class AttachedCommand:
    """The series' server as a point's load sees it (what engines.command.ServerCommand gives a
    cell that starts its own)."""

    argv: list[str]
    shown_env: dict[str, str]
    base_url: str
    served_model: str | None


@dataclass(frozen=True)
class AttachedPlan:
    """The plan a point's load runs on: its own cell and prompts, the series' server."""

    cell: Cell
    dataset: Dataset
    sizing: dict[str, Any] | None
    command: AttachedCommand


def end_with_snakemake() -> None:
    """End this job once the Snakemake it is a job of is gone: a SIGTERM to itself, so that its
    server is torn down as on Snakemake's own SIGTERM. A SIGKILLed Snakemake sends none, and a
    service job that waited for one would run, and hold its server, for ever. (Not
    PR_SET_PDEATHSIG: it fires when the thread that started the job ends, and Snakemake starts
    jobs from worker threads.)"""
    owner = owner_of(os.getpid())
    if owner is None:
        return  # not a Snakemake job (a test, a standalone run): its caller ends it

    def watch() -> None:
        while is_running(owner.pid, owner.start_ticks):
            time.sleep(OWNER_POLL_S)
        say(f"the Snakemake run (pid {owner.pid}) is gone: the series' server job ends")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="end-with-snakemake", daemon=True).start()


def _hold() -> None:
    """Keep the service job alive until Snakemake ends it (SIGTERM): a service that ends early
    would leave its points to find out alone."""
    while True:
        time.sleep(3600)


def serve_series(inputs: CellInputs, record: Path) -> None:
    """The series' service job: baseline, launch, wait until it answers, put it on record, keep
    it running until SIGTERM (Snakemake's, or its own once Snakemake is gone), stop it. A
    server that fails to start or dies is on record too (`failed`, `died`, with the reason), so
    every point fails with it, saying why."""
    end_with_snakemake()
    cell = inputs.cell
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    start_id = f"{cell.sweep.series}@{started_at}#{os.getpid()}"
    base = {"series": cell.sweep.series, "start_id": start_id, "job_pid": os.getpid()}
    write_json(record, {**base, "state": "starting"})
    if not series.wait_for_a_point(record.parent.parent, cell.sweep.series, NO_POINT_S):
        write_json(record, {**base, "state": "unused", "reason": "no point of the series ran"})
        say(f"{cell.sweep.series}: no point of the series queued; its server is not started")
        return
    adapter = adapter_for(cell.engine_kind)
    try:
        with sigterm_raises(), server_api_key(engine_api_key(cell)):
            end_leftovers(running_record(inputs))  # before the baseline: a leftover skews it
            check_inputs(inputs)
            plan = plan_launch(inputs, adapter, load_prompts(cell), record.with_suffix(".log"))
            server = plan.launch.server
            meter = meter_for(plan.cell, plan.command.env)
            sampler = memory_sampler(plan.cell, lambda: server.stop(timeout_s=2), meter)
            baseline = cell.run.memory.baseline_samples
            idle_across(meter, lambda: sampler.take_baseline(baseline), sampler)
            with plan.launch:
                started = start_and_wait(plan, adapter, sampler)
                server_pid, memory_pid = started.window.server_roots
                ready = {
                    **base,
                    "state": "ready",
                    "started_at": started_at,
                    "launch_cell": plan.cell.id,
                    "pid": server_pid,
                    "memory_pid": memory_pid,
                    "base_url": plan.command.base_url,
                    "served_model": plan.command.served_model,
                    "ready_s": started.ready_s,
                    "ready_at": time.time(),
                    "server_version": started.server_version,
                    "container_image_id": started.container_image_id,
                    "server_command": redact(plan.command.argv),
                    "server_env": plan.command.shown_env,
                    "engine_version": inputs.engine_info.get("version"),
                    "sizing": plan.sizing,
                    "baseline": [asdict(s) for s in sampler.samples if s.phase == "baseline"],
                    "energy": meter.series_facts(),
                    "log": str(record.with_suffix(".log")),
                }
                write_json(record, ready)
                while server.alive():
                    time.sleep(0.5)
                write_json(
                    record,
                    {**ready, "state": "died", "reason": server.died_message("as its points ran")},
                )
    except Exception as exc:  # SIGTERM passes through: the server is stopped on the way out
        write_json(record, {**base, "state": "failed", "reason": f"{type(exc).__name__}: {exc}"})
        say(f"{cell.sweep.series}: server failed: {exc}")
    _hold()


class SharedServer:
    """A point's run on its series' server (run_cell's `serving`): queued at once, attached once
    the server answers, measured in its turn, the server handed on when it leaves."""

    def __init__(
        self, inputs: CellInputs, adapter: EngineAdapter, dataset: Dataset, log_path: Path
    ) -> None:
        if inputs.series_record is None:
            raise ValueError("a shared point needs its series' server record")
        self.inputs, self.adapter, self.dataset, self.log_path = inputs, adapter, dataset, log_path
        self.cell = inputs.cell
        self.cells_dir = inputs.out_dir.parent
        self.sampler = memory_sampler(self.cell, self._stop_server)
        self.record: dict[str, Any] = {}
        self.plan: AttachedPlan | None = None
        self.meter: Meter | None = None  # opened once the server's record says which GPUs
        self._stack = ExitStack()
        self._log_from = 0

    def launch_facts(self) -> CellMetrics:
        return {}  # the launch is the series' (Ready.shared carries it)

    def __enter__(self) -> SharedServer:
        self._stack.enter_context(series.registered(self.cells_dir, self.cell))
        return self

    def ready(self) -> Ready:
        record_path = self.inputs.series_record
        timeout = self.cell.run.ready_timeout_s + ATTACH_MARGIN_S
        first = series.wait_for_server(record_path, timeout)
        turn = self._stack.enter_context(series.turn(self.cells_dir, self.cell, first))
        record = series.wait_for_server(record_path, 0)  # still the same, still up?
        if record["start_id"] != first["start_id"]:
            raise ServerError("the series' server was restarted while this point waited")
        self.record = record
        self._log_from = _size(Path(record["log"]))
        self.meter = attached_meter(self.cell.run.energy_source, record.get("energy"))
        self.sampler.energy = self.meter.probe
        self._sample_from_turn(record)
        command = AttachedCommand(
            argv=record["server_command"],
            shown_env=record["server_env"],
            base_url=record["base_url"],
            served_model=record["served_model"],
        )
        self.plan = AttachedPlan(self.cell, self.dataset, record.get("sizing"), command)
        say(f"{self.cell.id}: on the series' server ({record['start_id']}), turn {turn.position}")
        roots = (record["pid"], record["memory_pid"])
        window = BenchWindow(self.adapter, record["base_url"], self.sampler, roots, self.meter)
        shared: CellMetrics = {
            "server_command": record["server_command"],
            "server_env": record["server_env"],
            "engine_version": record.get("engine_version"),
            "server_start": {
                "id": record["start_id"],
                "position": turn.position,
                "pid": record["pid"],
                "ready_s": record["ready_s"],
                "started_at": record["started_at"],
                "launch_cell": record["launch_cell"],
            },
        }
        return Ready(
            record["ready_s"],
            record["server_version"],
            record["container_image_id"],
            window,
            shared,
        )

    def _sample_from_turn(self, record: dict[str, Any]) -> None:
        """The server job's pre-launch baseline (without its own process's RSS: the client's
        baseline is this point's first sample; without its energy readings, on that job's clock
        and counter: the record's idle draw is theirs), then samples from this turn on."""
        theirs = {"client_rss_kib": None, "power_w": None, "energy_j": None}
        baseline = [MemorySample(**{**s, **theirs}) for s in record["baseline"]]
        self.sampler.samples.extend(baseline)
        self.sampler.server_pid = record["memory_pid"]
        self.sampler.watch_client(os.getpid())
        self.sampler.phase = "warmup"  # no sample of a turn is a baseline sample
        self.sampler.start()

    def died(self, when: str) -> str | None:
        """The server's death as every point of its series reports it (series.gone_reason),
        whenever in this point's run it is seen."""
        if not self.record or series.alive(self.record.get("pid")):
            return None
        return series.gone_reason(self.inputs.series_record, self.record)

    def _stop_server(self) -> None:
        pid = self.record.get("pid")
        if pid:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        """Hand the server on. A stage that failed on a server that is gone (the guard's
        ConnectionError) fails the point with the server's death instead, as a load does."""
        try:
            self._copy_log()
        finally:
            self._stack.close()
        server_error = isinstance(exc, ServerError)
        if isinstance(exc, Exception) and not server_error and (died := self.died("at a stage")):
            raise ServerError(died) from exc

    def _copy_log(self) -> None:
        """This point's part of the series' server log, as its server.log."""
        if not self.record:
            self.log_path.write_text("(the series' server never answered this point)\n")
            return
        log = Path(self.record["log"])
        with log.open("rb") as handle:
            handle.seek(self._log_from)
            part = handle.read()
        head = (
            f"(the series' server log {log}, from byte {self._log_from}: what it wrote during "
            f"this point's turn on {self.record['start_id']})\n"
        )
        self.log_path.write_bytes(head.encode() + part)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
