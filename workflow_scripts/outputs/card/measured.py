"""What the cell measured, each figure beside its reference and how it was measured."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...loadgen.metrics import send_lag_note
from ...loadgen.request_table import RequestTable
from ...process.machine_use import attempts_note, client_note, interference_note
from ...process.memory import understates_note
from ...vocabulary import CellMetrics, Status
from ..compact import completed_text, conversation_columns, peak_mem_gib
from ..spec_gain import content_flag
from ..stability import stability
from ..stats import bootstrap_intervals, request_arrays
from .model import Section, fmt

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
    "anon": "RssAnon of /proc/<pid>/status summed over the server's process tree, same "
    "sampling: pages only the server holds (heap, KV cache, weights read into memory), which "
    "MemAvailable cannot count as available",
    "file": "RssFile, same tree and sampling: mapped file pages (weights mmap'd from the model "
    "file, libraries); page cache, which MemAvailable counts as available",
    "shmem": "RssShmem, same tree and sampling: shared memory (tmpfs, /dev/shm)",
    "unseen": "not measured: the server runs in a container whose processes this run does not see",
    "gpu": "used GPU memory summed over devices (NVML), same sampling",
    "ready": "launch → health check answered and a one-token probe completed",
    "prefix_cache": "prompt tokens the engine served from its prefix cache ÷ prompt tokens, "
    "from its own counts (llama.cpp: each response's timings; vLLM, SGLang: /metrics "
    "counters over the measured run); on or off by the engine's settings",
    "send_lag": "actual send − scheduled send (trace or Poisson arrivals): p50 (p99)",
    "from_schedule": "as above, counted from the request's scheduled send (trace or Poisson "
    "arrivals): its wait for a free slot included; median (p90 / p99)",
}


def _dist(metrics: CellMetrics, key: str) -> str:
    value = metrics.get(key)
    if not isinstance(value, dict) or value.get("median") is None:
        return "—"
    return f"{value['median']:.1f} ms ({_or_dash(value.get('p90'))} / {_or_dash(value.get('p99'))})"


def _or_dash(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def memory_how(mem: Mapping[str, Any]) -> str:
    """How "Peak memory" was measured: the seeds' MemAvailable drop, less our load client's own
    RSS rise where the client was sampled (then the drop with it is given too)."""
    base = mem.get("baseline_available_gib")
    spread = mem.get("baseline_spread_gib")
    text = (
        "MemAvailable drop from a pre-launch median baseline"
        + (f" ({base:.2f} GiB" if base is not None else " (")
        + (f", spread {spread:.2f} GiB)" if spread is not None else ")")
        + f", sampled every {mem.get('interval_s', '?')} s from before launch to after teardown "
        "(model load included)"
    )
    less_client = mem.get("peak_delta_less_client_gib")
    if less_client is not None:
        text += (
            ", less at each sample the load client's RSS rise above its own pre-launch RSS "
            f"(at most {fmt(mem.get('client_rss_rise_peak_gib'), 'GiB')}), so the server is not "
            f"charged for our client (the drop with the client: "
            f"{fmt(mem.get('peak_delta_gib'), 'GiB')})"
        )
    text += f"; {GIB}"
    phases = [(name, mem.get(f"{name}_peak_delta_gib")) for name in ("load", "warmup", "bench")]
    shown = ", ".join(f"{name} {value:.2f}" for name, value in phases if value is not None)
    by_phase = "Peak by phase (GiB)" if less_client is None else "Drop by phase, client included"
    return text + (f". {by_phase}: {shown}" if shown else "")


def peak_memory_row(mem: Mapping[str, Any], reference: str) -> tuple[str, str, str, str]:
    """ "Peak memory": the MemAvailable drop; where it understates what the server holds
    (`mem.delta_understates`), it is marked so and the row says why before how it was taken."""
    peak = peak_mem_gib(mem)
    how = memory_how(mem) if mem else "no memory samples"
    note = understates_note(mem, peak)
    if not note:
        return ("Peak memory", fmt(peak, "GiB"), reference, how)
    shown = f"{fmt(peak, 'GiB')}, understated: not what the server holds"
    return ("Peak memory", shown, reference, f"{note[0].upper()}{note[1:]}. {how}")


def server_split_rows(mem: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """The server tree's anonymous and file-backed RSS peaks (and shared memory, where it held
    any); none for a metrics.json from before these figures."""
    if "server_rss_anon_peak_gib" not in mem:
        return []
    rows = []
    for label, key, how in (
        ("Server anonymous memory peak", "server_rss_anon_peak_gib", HOW["anon"]),
        ("Server file-backed memory peak", "server_rss_file_peak_gib", HOW["file"]),
        ("Server shared memory peak", "server_rss_shmem_peak_gib", HOW["shmem"]),
    ):
        value = mem.get(key)
        if key == "server_rss_shmem_peak_gib" and not value:
            continue
        rows.append((label, fmt(value, "GiB"), "—", how if value is not None else HOW["unseen"]))
    return rows


def completed_value(metrics: CellMetrics) -> str:
    """`6/6, 0 errors, 0 incomplete, 12.3 s`; a conversation cell's turns and conversations
    apart, as the tables say them (`compact.completed_text`)."""
    if metrics.get("completed") is None:
        return "—"
    if metrics.get("turns"):
        text = completed_text({**metrics, **conversation_columns(metrics)})
    else:
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
        peak_memory_row(mem, ref("peak_mem_gib", "GiB")),
        ("Server RSS peak", fmt(mem.get("server_rss_peak_gib"), "GiB"), "—", HOW["rss"]),
        *server_split_rows(mem),
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
        ("Prefix-cache hit", prefix_cache_value(metrics), "—", HOW["prefix_cache"]),
    ]
    for name, key in (("TTFT", "ttft"), ("E2E latency", "e2el")):
        if metrics.get(f"{key}_from_schedule_ms"):
            value = _dist(metrics, f"{key}_from_schedule_ms")
            rows.append((f"{name} from schedule", value, "—", HOW["from_schedule"]))
    if lag := metrics.get("send_lag_ms"):
        lag_text = f"{fmt(lag.get('p50'), 'ms')} (p99 {fmt(lag.get('p99'), 'ms')})"
        check = f"; sent late: {note}" if (note := send_lag_note(metrics)) else ""
        rows.append(("Send lag", lag_text, "—", HOW["send_lag"] + check))
    return rows


def prefix_cache_value(metrics: CellMetrics) -> str:
    """`41.2 % (cache on)`; `not reported` where the engine gives no count."""
    hit, state = metrics.get("prefix_cache_hit_pct"), metrics.get("prefix_cache")
    text = "not reported" if hit is None else f"{hit:.1f} %"
    return f"{text} (cache {state})" if state else text


def by_turn_section(metrics: CellMetrics) -> Section | None:
    """A conversation cell's TTFT, TPOT and prefix-cache hit by turn (metrics.json
    `by_turn`); None outside conversations."""
    turns = metrics.get("by_turn")
    if not turns:
        return None
    rows = [
        (
            str(t["turn"]),
            str(t["requests"]),
            _dist(t, "ttft_ms"),
            _dist(t, "tpot_ms"),
            _or_dash(t.get("prefix_cache_hit_pct")),
        )
        for t in turns
    ]
    header = ("Turn", "Requests", "TTFT median (p90 / p99)", "TPOT median (p90 / p99)", "Hit %")
    note = (
        "Each request of turn k carries the conversation's first k human turns and the answers "
        "between them (the dataset's, or the model's own with `history: model`); a cache that "
        "holds the earlier turns leaves only "
        f"the new one to prefill (prefix cache {metrics.get('prefix_cache') or 'unknown'})."
    )
    return Section("Conversations by turn", header, rows, paragraphs=[note])


def measured_section(metrics: CellMetrics, reference: Mapping[str, Any]) -> Section:
    header = ("Figure", "Measured", "Published reference", "How it was measured")
    return Section("Measured results", header, measured_rows(metrics, reference))


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
    if random_tokens := content_flag(metrics):
        notes.append(random_tokens[0].upper() + random_tokens[1:] + ".")
    if spec.get("drafts") == 0:
        notes.append("The drafter proposed no tokens during the measured run.")
    if not spec and metrics.get("status") != Status.DONE:
        notes.append("No acceptance figures: the cell did not run to the end.")
    header = ("Figure", "Measured", "Published reference", "How it was measured")
    return Section("Speculative decoding", header, rows, paragraphs=notes)


INTERVAL_ROWS = [
    ("Decode tok/s", "decode_tok_s"),
    ("Prefill tok/s", "prefill_tok_s"),
    ("TTFT median (ms)", "ttft_median_ms"),
    ("TTFT p99 (ms)", "ttft_p99_ms"),
    ("TPOT median (ms)", "tpot_median_ms"),
    ("TPOT p99 (ms)", "tpot_p99_ms"),
]


def intervals_section(requests: RequestTable) -> Section:
    """This run's 95 % intervals (bootstrap over its requests) and its throughput over time:
    how far the figures depend on which requests the run held, and whether it was steady."""
    arrays = request_arrays(requests)
    intervals = bootstrap_intervals(arrays)
    rows = []
    for label, key in INTERVAL_ROWS:
        found = intervals[key]
        text = "—" if found.lo is None else f"{found.value:.2f} [{found.lo:.2f}, {found.hi:.2f}]"
        rows.append((label, text))
    steady = stability(requests, arrays)
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
    (workflow_scripts.process.machine_use), with each check's verdict."""
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
                (
                    f"disturbed: {note}"
                    if (note := interference_note(other))
                    else f"clear: under {other['cpu_threshold_percent_of_core']:.0f} % of a core "
                    f"and {other['mem_threshold_gib']:.2f} GiB"
                )
                + attempts_note(metrics),
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
