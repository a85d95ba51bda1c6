"""Run one cell: baseline memory -> launch -> ready -> warmup -> load -> scrape -> teardown ->
results/cells/<cell>/{metrics.json, requests.jsonl, memory.csv, server.log}.

A benchmark failure is a result (status `failed`, with the reason) so the summary shows it;
an interruption (Ctrl-C, SIGTERM) tears the server down and writes no result at all.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from ..atomic import atomic_open, write_json, write_text
from ..engines import adapter_for
from ..engines.base import EngineAdapter, SpecCounters
from ..engines.command import (
    ServerCommand,
    cell_server_command,
    cell_weights,
    container_image_id,
    container_pid,
    request_fields,
)
from ..engines.provision import native_build_mismatch
from ..engines.server_auth import auth_headers, client_api_key, engine_api_key, server_api_key
from ..loadgen.client import LoadResult, LoadSpec, run_load
from ..loadgen.command import client_argv
from ..loadgen.datasets import Dataset, Prompt, load_dataset
from ..loadgen.metrics import compute_metrics
from ..terminal import say
from ..vocabulary import Cell, CellMetrics, Status
from .context_guard import guard_prompts, size_before_launch
from .failures import bump_failures
from .machine_use import Thresholds, UseSnapshot, client_use, interference, take_snapshot
from .memory import KIB_PER_GIB, MemorySampler, summarize_memory, write_memory_csv
from .server import (
    PortLease,
    ServerError,
    ServerProcess,
    reserve_port,
    sigterm_raises,
    wait_ready,
)
from .specdecode import (
    acceptance_from_counters,
    acceptance_from_request_fields,
    acceptance_from_server_info,
    acceptance_from_timings,
    cap_note,
)


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


def host_info(gpu_devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "kernel": platform.release(),
        "gpus": gpu_devices or [],
        "driver": (gpu_devices or [{}])[0].get("driver") if gpu_devices else None,
    }


def identity(cell: Cell) -> CellMetrics:
    return {
        "cell": cell.id,
        "model": cell.model,
        "engine": cell.engine,
        "quant": cell.quant,
        "drafter": cell.drafter,
        "workload": cell.workload,
        "concurrency": cell.concurrency,
        "num_prompts": cell.workload_spec["num_prompts"],
        "synthetic": cell.weights.get("source") == "synthetic",
    }


def load_spec_for(cell: Cell, base_url: str, served_model: str | None) -> LoadSpec:
    w = cell.workload_spec
    return LoadSpec(
        base_url=base_url,
        concurrency=int(w["concurrency"]),
        max_tokens=int(w["max_tokens"]),
        model=served_model,
        endpoint=w["endpoint"],
        temperature=float(w["temperature"]),
        ignore_eos=bool(w["ignore_eos"]),
        request_rate=w["request_rate"],
        max_seconds=w["max_seconds"],
        grace_s=float(w["grace_s"]),
        warmup_requests=int(w["warmup_requests"]),
        request_timeout_s=float(w["request_timeout_s"]),
        api_key=client_api_key(cell),
        extra_body=request_fields(cell),
    )


def _scrape(base_url: str, paths: list[str]) -> str | None:
    """The first of `paths` (a path, then its deprecated alias) the server answers."""
    for path in paths:
        try:
            resp = requests.get(base_url + path, timeout=10, headers=auth_headers())
        except requests.RequestException:
            continue
        if resp.status_code == 200:
            return resp.text
    return None


def run_cell(inputs: CellInputs) -> CellMetrics:
    """Run the cell and write its files; return metrics.json's content. The stages, in order:
    plan the launch, start the server and wait for it, guard the prompts, warm up and load,
    scrape, tear down, record; a failure at any of them is the cell's result."""
    cell, out = inputs.cell, inputs.out_dir
    out.mkdir(parents=True, exist_ok=True)
    adapter = adapter_for(cell.engine_spec["kind"])
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result: CellMetrics = {
        **identity(cell),
        "status": Status.FAILED,
        "reason": None,
        "started_at": started_at,
    }
    records: list = []
    sampler: MemorySampler | None = None
    log_path = out / "server.log"
    log_path.unlink(missing_ok=True)
    try:
        with sigterm_raises(), server_api_key(engine_api_key(cell)):
            check_inputs(inputs)
            plan = plan_launch(inputs, adapter, result)
            server = ServerProcess.for_command(plan.command, log_path)
            sampler = memory_sampler(plan.cell, server)
            start_sampling(sampler, plan.cell)
            try:
                window = start_and_wait(plan, adapter, server, sampler, result)
                prompts = guard(plan, adapter, result)
                sampler.set_phase("warmup")
                spec = load_spec_for(plan.cell, plan.command.base_url, plan.command.served_model)
                load = run_load(
                    spec,
                    prompts,
                    on_measure_start=window.measure_start,
                    progress_label=plan.cell.id,
                    on_measure_end=window.measure_end,
                )
                records = load.records
                died = None if server.alive() else server.died_message("while the load ran")
                window.scrape_after()
                sampler.set_phase("teardown")
            finally:
                server.stop()
                sampler.stop()
            record(result, inputs, plan, spec, load, window, sampler)
            check_run(result, plan, sampler, died)
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
    result["weights"] = _weights_provenance(inputs.weights_manifest)
    result["engine_info"] = {k: v for k, v in inputs.engine_info.items() if k != "reason"}
    _write_outputs(out, result, records)
    return result


def check_inputs(inputs: CellInputs) -> None:
    """A failed engine or weights step, or a native build from another CPU, fails the cell
    before anything starts."""
    for what, stamp in (
        ("engine unusable", inputs.engine_info),
        ("weights not available", inputs.weights_manifest),
        ("drafter weights not available", inputs.drafter_manifest or {}),
    ):
        if stamp.get("status") == Status.FAILED:
            raise RuntimeError(f"{what}: {stamp.get('reason')}")
    if mismatch := native_build_mismatch(inputs.engine_info):
        raise RuntimeError(f"engine unusable here: {mismatch}")


@dataclass(frozen=True)
class LaunchPlan:
    """What the launch stage decided: the cell as it runs (its context sized when the guard
    sizes it), its prompts, the server command (made once, here) and the port held for it."""

    cell: Cell
    dataset: Dataset
    sizing: dict[str, Any] | None
    command: ServerCommand
    port_lease: PortLease


def plan_launch(inputs: CellInputs, adapter: EngineAdapter, result: CellMetrics) -> LaunchPlan:
    cell = inputs.cell
    dataset = load_dataset(cell.workload_spec["dataset"], int(cell.workload_spec["num_prompts"]))
    result["dataset_sha256"] = dataset.sha256
    result["dataset_note"] = dataset.note
    result["prompt_indices"] = [p.index for p in dataset.prompts]
    sizing = None
    if cell.run["context_guard"] == "size":  # before launch: -c is a launch flag
        cell, sizing = size_before_launch(
            cell,
            adapter,
            inputs.engine_info,
            inputs.weights_manifest,
            dataset.prompts,
            inputs.out_dir / "context-sizing.log",
        )
    port_lease = reserve_port(cell.run["host"], adapter.container_port(cell))
    weights, drafter_weights = cell_weights(cell, inputs.weights_manifest, inputs.drafter_manifest)
    command = cell_server_command(
        cell, adapter, inputs.engine_info, weights, drafter_weights, port_lease.port
    )
    result["server_command"] = command.argv
    result["server_env"] = command.shown_env
    result["engine_version"] = inputs.engine_info.get("version")
    return LaunchPlan(cell, dataset, sizing, command, port_lease)


def memory_sampler(cell: Cell, server: ServerProcess) -> MemorySampler:
    """The cell's memory sampler; below the floor, it stops the server."""
    mem_cfg = cell.run["memory"]

    def on_floor(sample):
        server.stop(timeout_s=2)

    return MemorySampler(
        interval_s=float(mem_cfg["interval_s"]),
        floor_kib=int(float(mem_cfg["floor_gib"]) * KIB_PER_GIB),
        on_floor=on_floor,
    )


def start_sampling(sampler: MemorySampler, cell: Cell) -> None:
    """The baseline before launch, then sampling until teardown."""
    sampler.take_baseline(int(cell.run["memory"]["baseline_samples"]))
    sampler.start()


class BenchWindow:
    """What is read at the edges of the measured run: the engine's speculative-decoding counters
    before and after, and the CPU snapshots of the server's and the client's trees."""

    def __init__(
        self,
        adapter: EngineAdapter,
        base_url: str,
        sampler: MemorySampler,
        server_roots: tuple[int | None, ...],
    ) -> None:
        self.adapter, self.base_url = adapter, base_url
        self.sampler, self.server_roots = sampler, server_roots
        self.counters: dict[str, SpecCounters | None] = {}
        self.use: dict[str, UseSnapshot] = {}

    def _counters(self) -> SpecCounters | None:
        text = _scrape(self.base_url, self.adapter.paths_to_try(self.adapter.metrics_path))
        return self.adapter.parse_spec_metrics(text) if text else None

    def measure_start(self) -> None:
        self.sampler.set_phase("bench")
        self.counters["before"] = self._counters()
        self.use["start"] = take_snapshot(self.server_roots)

    def measure_end(self) -> None:
        self.use["end"] = take_snapshot(self.server_roots)

    def scrape_after(self) -> None:
        self.counters["after"] = self._counters()


def start_and_wait(
    plan: LaunchPlan,
    adapter: EngineAdapter,
    server: ServerProcess,
    sampler: MemorySampler,
    result: CellMetrics,
) -> BenchWindow:
    cell, command = plan.cell, plan.command
    sampler.set_phase("load")
    server.start()
    sampler.server_pid = server.pid
    probe = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    if command.served_model:
        probe["model"] = command.served_model
    result["ready_s"] = wait_ready(
        server, command.base_url, adapter.health_path, float(cell.run["ready_timeout_s"]), probe
    )
    say(f"{cell.id}: server ready in {result['ready_s']:.1f} s; load test starts")
    result["server_version"] = adapter.server_version(command.base_url)
    if command.container:
        result["container_image_id"] = container_image_id(command.container)
        sampler.server_pid = container_pid(command.container) or server.pid
    server_roots = (server.pid, sampler.server_pid)
    sampler.watch_client(os.getpid(), exclude=server_roots)
    return BenchWindow(adapter, command.base_url, sampler, server_roots)


def guard(plan: LaunchPlan, adapter: EngineAdapter, result: CellMetrics) -> list[Prompt]:
    prompts, report = guard_prompts(
        plan.cell, adapter, plan.command.base_url, plan.dataset.prompts, plan.sizing
    )
    result["context_guard"] = report.to_dict()
    report.enforce()  # `fail`, or nothing left: the cell fails before any load
    return prompts


def record(
    result: CellMetrics,
    inputs: CellInputs,
    plan: LaunchPlan,
    spec: LoadSpec,
    load: LoadResult,
    window: BenchWindow,
    sampler: MemorySampler,
) -> None:
    cell, command = plan.cell, plan.command
    records = load.records
    result.update(compute_metrics(records, hit_time_cap=load.hit_time_cap))
    result["not_started"] = load.not_started
    result["load"] = spec.public()
    result["client_command"] = client_argv(
        cell.workload_spec,
        command.base_url,
        str(inputs.out_dir),
        command.served_model,
        request_fields(cell),
    )
    result["spec"] = _spec_result(cell, window.counters, records)
    use = window.use
    if "start" in use and "end" in use:
        choice = load.processes.to_dict() if load.processes else None
        result["client"] = client_use(use["start"], use["end"], choice, inputs.thresholds)
        result["interference"] = interference(
            use["start"], use["end"], sampler.samples, inputs.thresholds
        )


def check_run(
    result: CellMetrics, plan: LaunchPlan, sampler: MemorySampler, died: str | None
) -> None:
    """A run whose figures compare with nothing fails the cell: the memory watchdog fired, the
    server died mid-run, or no request completed."""
    if sampler.tripped is not None:
        raise ServerError(
            f"memory watchdog: MemAvailable fell to "
            f"{sampler.tripped.mem_available_kib / KIB_PER_GIB:.2f} GiB, below the floor "
            f"of {plan.cell.run['memory']['floor_gib']} GiB; the server was killed"
        )
    if died:  # figures from a server that died mid-run compare with nothing
        raise ServerError(died)
    if result["completed"] == 0:
        raise ServerError(f"no request completed ({result['errors_by_reason']})")


def _spec_result(cell: Cell, counters: dict, records: list) -> dict[str, Any] | None:
    """Acceptance from the best source the engine gave: per-response speculative fields (over
    the completed requests), counter deltas, a running mean read at warmup end and bench end,
    or per-response timings. `source` says which; `cap_note` flags figures that the time cap
    put out of step with the completed requests."""
    if cell.drafter_spec is None:
        return None
    before, after = counters.get("before"), counters.get("after")
    spec = acceptance_from_request_fields(records)
    if spec is None and after:
        spec = acceptance_from_counters(before or SpecCounters(), after)
        spec = spec or acceptance_from_server_info(before, after, records)
    spec = spec or acceptance_from_timings(records)
    if spec is None:
        return {
            "acceptance_rate": None,
            "mean_acceptance_length": None,
            "per_position": [],
            "source": None,
            "note": "the engine exposed no acceptance figures",
        }
    per_position = list(spec.get("per_position") or [])
    while per_position and not per_position[-1]:
        per_position.pop()  # the engine sizes the list to its largest possible draft
    spec["per_position"] = per_position
    cross = acceptance_from_timings(records)
    if cross and spec["source"] != "timings":
        spec["timings_acceptance_rate"] = cross["acceptance_rate"]
    note = cap_note(spec, records)
    if note:
        spec["cap_note"] = note
    return spec


def _weights_provenance(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": manifest.get("source"),
        "spec_digest": manifest.get("spec_digest"),
        "files": [{k: f[k] for k in ("name", "size", "sha256")} for f in manifest.get("files", [])],
        "resolved": manifest.get("resolved"),
    }


def _write_outputs(out: Path, result: CellMetrics, records: list) -> None:
    with atomic_open(out / "requests.jsonl") as handle:
        for record in records:
            handle.write(json.dumps(record.to_dict(), separators=(",", ":")) + "\n")
    if not (out / "server.log").exists():
        write_text(out / "server.log", "(the server was never started)\n")
    if not (out / "memory.csv").exists():
        write_memory_csv(str(out / "memory.csv"), [])
    write_json(out / "metrics.json", result)


def write_blocked(cell: Cell, out: Path) -> CellMetrics:
    """A cell the config marks blocked: listed with its reason, never run."""
    result: CellMetrics = {
        **identity(cell),
        "status": Status.BLOCKED,
        "reason": cell.blocked,
        "mem": None,
        "spec": None,
    }
    write_text(out / "server.log", f"(blocked: {cell.blocked})\n")
    write_text(out / "requests.jsonl", "")
    write_memory_csv(str(out / "memory.csv"), [])
    write_json(out / "metrics.json", result)
    return result


def run_cell_from_snakemake(sm) -> None:
    """The cell rule's body: settings from params, manifests from inputs."""
    cell = Cell.from_dict(json.loads(sm.params.cell))
    out = Path(sm.output.metrics).parent
    if cell.blocked:
        write_blocked(cell, out)
        return
    drafter = sm.input.get("drafter_weights")
    inputs = CellInputs(
        cell=cell,
        out_dir=out,
        engine_info=json.loads(Path(sm.input.engine).read_text()),
        weights_manifest=json.loads(Path(sm.input.weights).read_text()),
        drafter_manifest=json.loads(Path(drafter).read_text()) if drafter else None,
        failures_dir=Path(sm.params.failures_dir),
        # read from the config, not params: a threshold only decides a flag, and editing one
        # must not rerun a measurement
        thresholds=Thresholds.from_config(sm.config.get("checks")),
    )
    result = run_cell(inputs)
    if result["status"] == Status.DONE:
        say(f"{cell.id}: done, {result['decode_tok_s']:.1f} decode tok/s")
    else:
        reason = (result.get("reason") or "no reason given").splitlines()[0][:300]
        say(f"{cell.id}: failed: {reason}")
