"""How to rerun the cell and where its inputs came from: full commands and provenance."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from ...engines.command import request_fields, with_env
from ...loadgen.command import client_argv
from ...text import first_line
from ...vocabulary import Cell, CellMetrics, Status
from .model import Section, fmt

# What the engine stamp says the server was: a pulled image (rolling tags drift, so its digest),
# or a binary built from a pinned source.
ENGINE_PROVENANCE = [
    ("image", "Image"),
    ("repo_digests", "Image digest"),
    ("image_id", "Image id"),
    ("sdist_sha256", "Engine source sha256"),
    ("binary", "Engine binary"),
]


def client_command(cell: Cell, metrics: CellMetrics, results_dir: str = "results") -> list[str]:
    """The standalone load generator's command line (`python -m workflow_scripts.loadgen`)
    for this cell's workload, against the server the cell ran (or its port, if none ran)."""
    if metrics.get("client_command"):
        return list(metrics["client_command"])
    load = metrics.get("load") or {}
    return client_argv(
        cell.workload_spec,
        load.get("base_url") or "http://127.0.0.1:<port>",
        f"{results_dir}/cells/{cell.id}",
        load.get("model"),
        load.get("extra_body") or request_fields(cell),
    )


def commands_section(cell: Cell, metrics: CellMetrics, results_dir: str = "results") -> Section:
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


def provenance_section(cell: Cell, metrics: CellMetrics) -> Section:
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
    published = cell.reference.get("source")
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
        rows.append(("Weights sha256", fmt(cell.weights.get("sha256"))))
    rows.append(("Token counts from", fmt(metrics.get("token_count_source"))))
    rows.append(
        (
            "Started / finished",
            f"{fmt(metrics.get('started_at'))} / {fmt(metrics.get('finished_at'))}",
        )
    )
    return Section("Provenance", ("Field", "Value"), rows)
