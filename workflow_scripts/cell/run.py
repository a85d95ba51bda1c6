"""Run one cell: baseline memory and idle draw -> launch -> ready -> warmup -> load -> scrape ->
teardown -> results/cells/<cell>/{metrics.json, requests.jsonl, memory.csv, server.log}.

A benchmark failure is a result (status `failed`, with the reason) so the summary shows it;
an interruption (Ctrl-C, SIGTERM) tears the server down and writes no result at all.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from ..engines import adapter_for
from ..engines.base import EngineAdapter
from ..engines.command import (
    ServerCommand,
    cell_server_command,
    cell_weights,
    container_image_id,
    container_pid,
    request_fields,
)
from ..engines.provision import native_build_mismatch
from ..loadgen.client import LoadSettings
from ..loadgen.command import client_argv
from ..loadgen.datasets import load_dataset
from ..loadgen.metrics import compute_metrics
from ..loadgen.prompts import Dataset, Prompt
from ..process.auth import client_api_key, engine_api_key, server_api_key
from ..process.leftovers import end_leftovers
from ..process.machine_use import (
    DISTURBED_ATTEMPTS,
    RERUN_SKIPPED,
    Thresholds,
    client_use,
)
from ..process.memory import KIB_PER_GIB, MemorySampler, summarize_memory, write_memory_csv
from ..process.serve import ServerLaunch
from ..process.server import ServerError, sigterm_raises
from ..redact import redact
from ..terminal import say
from ..vocabulary import Cell, CellMetrics, Status, identity
from .attempts import (
    NO_FAIR_RERUN,
    Attempt,
    BenchWindow,
    measure_once,
    measure_until_undisturbed,
    prefix_cache_facts,
    reruns_allowed,
)
from .context_guard import ContextGuardReport, guard_prompts, size_before_launch
from .energy import Meter, energy_record, meter_for
from .failures import bump_failures
from .record import host_info, weights_provenance, write_outputs
from .sampling import memory_sampler, start_sampling
from .specdecode import spec_result
from .trace_fit import fit_trace_plan


@dataclass(frozen=True)
class CellInputs:
    """What the DAG hands a cell: its settings and the manifests of what it depends on."""

    cell: Cell
    out_dir: Path
    engine_info: dict[str, Any]
    weights_manifest: dict[str, Any]
    drafter_manifest: dict[str, Any] | None = None
    failures_dir: Path | None = None
    thresholds: Thresholds = Thresholds()  # the config's `checks`: they decide flags only
    series_record: Path | None = None  # a shared series' server record (cell.series)
    floor_reference: dict[str, Any] | None = None  # a floor run's reference's metrics.json


def load_settings_for(cell: Cell, base_url: str, served_model: str | None) -> LoadSettings:
    w = cell.workload_spec
    return LoadSettings(
        base_url=base_url,
        concurrency=w.concurrency,
        max_tokens=w.max_tokens,
        model=served_model,
        endpoint=w.endpoint,
        # float(): a YAML `0` is an int, and metrics.json's `load` records these as floats
        temperature=float(w.temperature),
        ignore_eos=w.ignore_eos,
        request_rate=w.request_rate,
        max_seconds=w.max_seconds,
        grace_s=float(w.grace_s),
        warmup_requests=w.warmup_requests,
        request_timeout_s=float(w.request_timeout_s),
        api_key=client_api_key(cell),
        extra_body=request_fields(cell),
        record_outputs=w.record_outputs,
    )


def run_cell(inputs: CellInputs, serving: type[Serving] | None = None) -> CellMetrics:
    """Run the cell and write its files; return metrics.json's content. The stages, in order:
    plan the launch, start the server and wait for it (`serving`: the cell's own server, or a
    shared series' server, cell.shared), guard the prompts, warm up and load, scrape, tear
    down, record; a failure at any of them is the cell's result."""
    cell, out = inputs.cell, inputs.out_dir
    out.mkdir(parents=True, exist_ok=True)
    adapter = adapter_for(cell.engine_kind)
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result: CellMetrics = {
        **identity(cell),
        "status": Status.FAILED,
        "reason": None,
        "started_at": started_at,
        **prefix_cache_facts(cell, adapter),
    }
    records: list = []
    sampler: MemorySampler | None = None
    log_path = out / "server.log"
    log_path.unlink(missing_ok=True)
    try:
        with sigterm_raises(), server_api_key(engine_api_key(cell)):
            end_leftovers(running_record(inputs))  # before the baseline: a leftover skews it
            check_inputs(inputs)
            dataset = load_prompts(cell)
            result.update(dataset_facts(dataset))
            server = (serving or OwnServer)(inputs, adapter, dataset, log_path)
            result.update(server.launch_facts())
            sampler = server.sampler
            try:
                with server:  # leaving it stops the server (or hands a shared one on)
                    ready = server.ready()
                    result.update(ready.facts())
                    plan, fit = fit_trace_plan(server.plan, adapter)  # the guard counts these
                    result.update(fit)
                    prompts, report = guard(plan, adapter)
                    result["context_guard"] = report.to_dict()
                    report.enforce()  # `fail`, or nothing left: the cell fails before any load
                    command = plan.command
                    spec = load_settings_for(plan.cell, command.base_url, command.served_model)
                    window = ready.window
                    reruns = reruns_allowed(plan.cell, adapter, inputs.thresholds.rerun_disturbed)
                    kept, discarded = measure_until_undisturbed(
                        partial(
                            measure_once,
                            *(plan.cell, spec, prompts, window),
                            *(server.died, inputs.thresholds),
                        ),
                        reruns,
                        plan.cell.id,
                    )
                    records, died = kept.load.records, kept.died
                    sampler.set_phase("teardown")
            finally:
                sampler.stop()
            figures = measured(inputs, plan, spec, kept, window)
            if discarded:
                figures[DISTURBED_ATTEMPTS] = discarded
            elif kept.disturbed and inputs.thresholds.rerun_disturbed and not reruns:
                figures[RERUN_SKIPPED] = NO_FAIR_RERUN
            result.update(figures)
            check_run(figures, plan, sampler, died)
            result["status"] = Status.DONE
    except Exception as exc:  # Ctrl-C / SIGTERM pass through: no result is written for them
        result["status"] = Status.FAILED
        result["reason"] = f"{type(exc).__name__}: {exc}".strip()[:4000]
        result["traceback"] = traceback.format_exc()[-4000:]
        if inputs.failures_dir is not None:
            bump_failures(inputs.failures_dir, cell.id)
    finally:
        if sampler is not None:
            result["mem"] = summarize_memory(sampler.samples, sampler.interval_s)
            result["gpu_note"] = sampler.gpu.note
            write_memory_csv(str(out / "memory.csv"), sampler.samples)
    result.setdefault("mem", None)
    result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result["host"] = host_info(sampler.gpu.describe() if sampler else None)
    result["weights"] = weights_provenance(inputs.weights_manifest)
    result["engine_info"] = {k: v for k, v in inputs.engine_info.items() if k != "reason"}
    write_outputs(out, result, records)
    return result


class Serving(Protocol):
    """Where a cell's server comes from: what the run records of its launch, its memory
    sampler, the plan the load runs on (cell, prompts, command), and a `with` that ends it."""

    plan: Any
    sampler: MemorySampler

    def __init__(
        self, inputs: CellInputs, adapter: EngineAdapter, dataset: Dataset, log_path: Path
    ) -> None: ...
    def launch_facts(self) -> CellMetrics: ...
    def ready(self) -> Ready: ...
    def died(self, when: str) -> str | None: ...
    def __enter__(self) -> Serving: ...
    def __exit__(self, *exc: object) -> None: ...


class OwnServer:
    """The cell's own server: the memory baseline before its launch, started and waited on by
    this cell, stopped when the cell leaves it."""

    def __init__(
        self, inputs: CellInputs, adapter: EngineAdapter, dataset: Dataset, log_path: Path
    ) -> None:
        self.adapter, self.engine_info = adapter, inputs.engine_info
        self.plan = plan_launch(inputs, adapter, dataset, log_path)
        server = self.plan.launch.server
        self.meter = meter_for(self.plan.cell, self.plan.command.env)
        self.sampler = memory_sampler(self.plan.cell, lambda: server.stop(timeout_s=2), self.meter)

    def launch_facts(self) -> CellMetrics:
        return launch_facts(self.plan, self.engine_info)

    def __enter__(self) -> OwnServer:
        start_sampling(self.sampler, self.plan.cell, self.meter)
        self.plan.launch.__enter__()
        return self

    def ready(self) -> Ready:
        return start_and_wait(self.plan, self.adapter, self.sampler, self.meter)

    def died(self, when: str) -> str | None:
        server = self.plan.launch.server
        return None if server.alive() else server.died_message(when)

    def __exit__(self, *exc: object) -> None:
        self.plan.launch.__exit__(*exc)


def check_inputs(inputs: CellInputs) -> None:
    """A failed engine or weights step, a native build from another CPU, or a floor run's
    reference that did not finish (no pair is judged against it) fails the cell before anything
    starts."""
    for what, stamp in (
        ("engine unusable", inputs.engine_info),
        ("weights not available", inputs.weights_manifest),
        ("drafter weights not available", inputs.drafter_manifest or {}),
    ):
        if stamp.get("status") == Status.FAILED:
            raise RuntimeError(f"{what}: {stamp.get('reason')}")
    if mismatch := native_build_mismatch(inputs.engine_info):
        raise RuntimeError(f"engine unusable here: {mismatch}")
    reference = inputs.floor_reference
    if reference is not None and reference.get("status") != Status.DONE:
        why = (reference.get("reason") or "no reason given").strip().splitlines()[0][:300]
        raise RuntimeError(
            f"reference {reference.get('cell', '')} {reference.get('status')}: {why}; "
            "its floor run is not started"
        )


def load_prompts(cell: Cell) -> Dataset:
    """The workload's prompts, before anything starts (the loader reads the dataset as the config
    and the standalone client's flags spell it)."""
    workload = cell.workload_spec
    return load_dataset(workload.dataset.to_dict(), workload.num_prompts, workload.shared_prefix)


def dataset_facts(dataset: Dataset) -> CellMetrics:
    return {
        "dataset_sha256": dataset.sha256,
        "dataset_note": dataset.note,
        "prompt_indices": [p.index for p in dataset.prompts],
    }


@dataclass(frozen=True)
class LaunchPlan:
    """What the launch stage decided: the cell as it runs (its context sized when the guard
    sizes it), its prompts, and its server's launch: the port held, the command made once for
    it, the process not started yet."""

    cell: Cell
    dataset: Dataset
    sizing: dict[str, Any] | None
    launch: ServerLaunch[ServerCommand]

    @property
    def command(self) -> ServerCommand:
        return self.launch.command


def plan_launch(
    inputs: CellInputs, adapter: EngineAdapter, dataset: Dataset, log_path: Path
) -> LaunchPlan:
    cell = inputs.cell
    sizing = None
    if cell.run.context_guard == "size":  # before launch: -c is a launch flag
        cell, sizing = size_before_launch(
            cell,
            adapter,
            inputs.engine_info,
            inputs.weights_manifest,
            dataset.prompts,
            inputs.out_dir / "context-sizing.log",
        )
    weights, drafter_weights = cell_weights(cell, inputs.weights_manifest, inputs.drafter_manifest)
    launch = ServerLaunch.reserve(
        partial(cell_server_command, cell, adapter, inputs.engine_info, weights, drafter_weights),
        log_path,
        cell.run.host,
        adapter.container_port(cell),
        record_path=running_record(inputs),
    )
    return LaunchPlan(cell, dataset, sizing, launch)


def running_record(inputs: CellInputs) -> Path:
    """Where the cell's server is on record while it runs (process.leftovers): beside the cells'
    folders (`results/cells/.running/<cell>.json`), outside this cell's outputs."""
    return inputs.out_dir.parent / ".running" / f"{inputs.cell.id}.json"


def launch_facts(plan: LaunchPlan, engine_info: dict[str, Any]) -> CellMetrics:
    return {
        "server_command": redact(plan.command.argv),
        "server_env": plan.command.shown_env,
        "engine_version": engine_info.get("version"),
    }


@dataclass(frozen=True)
class Ready:
    """What the start stage found once the server answered."""

    ready_s: float
    server_version: str | None
    container_image_id: str | None
    window: BenchWindow
    shared: CellMetrics = field(default_factory=dict)  # a shared server's launch and start

    def facts(self) -> CellMetrics:
        found: CellMetrics = {"ready_s": self.ready_s, "server_version": self.server_version}
        if self.container_image_id is not None:
            found["container_image_id"] = self.container_image_id
        return {**found, **self.shared}


def start_and_wait(
    plan: LaunchPlan, adapter: EngineAdapter, sampler: MemorySampler, meter: Meter | None = None
) -> Ready:
    cell, command, server = plan.cell, plan.command, plan.launch.server
    sampler.set_phase("load")
    plan.launch.start()
    sampler.server_pid = server.pid  # its memory from the first second of loading
    sampler.watch_client(os.getpid(), exclude=(server.pid,))  # the server is never the client
    probe = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    if command.served_model:
        probe["model"] = command.served_model
    ready_s = plan.launch.wait_ready(adapter.health_path, cell.run.ready_timeout_s, probe)
    say(f"{cell.id}: server ready in {ready_s:.1f} s; load test starts")
    server_version = adapter.server_version(command.base_url)
    image_id = None
    if command.container:
        image_id = container_image_id(command.container)
        sampler.server_pid = container_pid(command.container) or server.pid
    server_roots = (server.pid, sampler.server_pid)
    sampler.watch_client(os.getpid(), exclude=server_roots)
    window = BenchWindow(adapter, command.base_url, sampler, server_roots, meter)
    return Ready(ready_s, server_version, image_id, window)


def guard(plan: LaunchPlan, adapter: EngineAdapter) -> tuple[list[Prompt], ContextGuardReport]:
    """The prompts that fit the server's per-slot context, and the report of the check."""
    return guard_prompts(
        plan.cell, adapter, plan.command.base_url, plan.dataset.prompts, plan.sizing
    )


def measured(
    inputs: CellInputs,
    plan: LaunchPlan,
    spec: LoadSettings,
    kept: Attempt,
    window: BenchWindow,
) -> CellMetrics:
    """The kept attempt's figures, how it was run, acceptance, the prefix cache's hit rate,
    what the client and the rest of the machine used during its bench, and its energy."""
    cell, command = plan.cell, plan.command
    load = kept.load
    records = load.records
    figures: CellMetrics = {
        **compute_metrics(
            records,
            hit_time_cap=load.hit_time_cap,
            turn_hit_pct=window.adapter.turn_hit_pct,
            planned_turns=load.planned_turns,
        ),
        "not_started": load.not_started,
        "load": spec.public(),
        "client_command": client_argv(
            cell.workload_spec,
            command.base_url,
            str(inputs.out_dir),
            command.served_model,
            request_fields(cell),
        ),
        "spec": spec_result(cell, window.counters, records),
        "prefix_cache_hit_pct": window.prefix_cache_hit_pct(records),
    }
    use = window.use
    if "start" in use and "end" in use:
        choice = load.processes.to_dict() if load.processes else None
        figures["client"] = client_use(use["start"], use["end"], choice, inputs.thresholds)
    if kept.interference is not None:
        figures["interference"] = kept.interference
    figures["energy"] = energy_record(
        window.meter, window.sampler, load, cell.concurrency, kept.interference, use
    )
    return figures


def check_run(
    figures: CellMetrics, plan: LaunchPlan, sampler: MemorySampler, died: str | None
) -> None:
    """A run whose figures compare with nothing fails the cell: the memory watchdog fired, the
    server died mid-run, or no request completed."""
    if sampler.tripped is not None:
        raise ServerError(
            f"memory watchdog: MemAvailable fell to "
            f"{sampler.tripped.mem_available_kib / KIB_PER_GIB:.2f} GiB, below the floor "
            f"of {plan.cell.run.memory.floor_gib} GiB; the server was killed"
        )
    if died:  # figures from a server that died mid-run compare with nothing
        raise ServerError(died)
    if figures["completed"] == 0:
        raise ServerError(f"no request completed ({figures['errors_by_reason']})")
