"""Benchmark any running OpenAI-compatible server from the command line:

    python -m workflow_scripts.loadgen --base-url http://127.0.0.1:8080 --dataset sharegpt \\
        --num-prompts 100 --concurrency 8 --max-seconds 300 --max-tokens 256 --out results/run1

writes DIR/requests.jsonl (one raw record per request, with its answer's text unless
`--no-record-outputs`) and DIR/metrics.json (the figures, the dataset's sha256 and the exact
prompt indices). The API key is read from the environment (`--api-key-env`, default
OPENAI_API_KEY) and is never written anywhere.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any

from ..atomic import atomic_open, write_json
from ..process.machine_use import UseSnapshot, client_use, take_snapshot
from ..process.server import sigterm_raises
from ..vocabulary import Status
from .client import LoadResult, LoadSettings, RunOptions, run_load
from .datasets import load_dataset
from .metrics import compute_metrics
from .prompts import HISTORIES, Dataset, DatasetError, think_time_alone_s
from .wire import Endpoint

# The dataset keys read only with `--conversations` (each flag the key with dashes).
CONVERSATION_KEYS = ("max_turns", "think_time_s", "history")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def _positive_int(text: str) -> int:
    value = int(text) if text.strip().lstrip("-").isdigit() else None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number above 0, got {text!r}")
    return value


def _base_url(text: str) -> str:
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest.strip("/"):
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text


def _env_name(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise argparse.ArgumentTypeError(f"expected an environment variable name, got {text!r}")
    return text


def parser() -> argparse.ArgumentParser:
    """The command line, its arguments in the order `--help` lists them."""
    p = argparse.ArgumentParser(
        prog="python -m workflow_scripts.loadgen",
        description="Streaming load test of an OpenAI-compatible server.",
    )
    p.add_argument(
        "--base-url", required=True, type=_base_url, help="server root, e.g. http://127.0.0.1:8080"
    )
    _dataset_arguments(p)
    _prompt_form_arguments(p)
    _load_arguments(p)
    _request_arguments(p)
    _run_arguments(p)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return parser().parse_args(argv)


def _dataset_arguments(p: argparse.ArgumentParser) -> None:
    """The prompts' source: its kind and file, a trace's format, content and window, the
    random kind's length, the seeded shuffle."""
    p.add_argument(
        "--dataset",
        choices=["sharegpt", "humaneval", "random", "jsonl", "trace"],
        default="sharegpt",
    )
    p.add_argument(
        "--dataset-path", help="the ShareGPT JSON, JSONL or trace file (sharegpt: cached)"
    )
    p.add_argument("--trace-format", choices=["mooncake", "burstgpt"], help="trace: its format")
    p.add_argument(
        "--trace-content",
        choices=["sharegpt", "humaneval"],
        default="sharegpt",
        help="trace: the real text its prompts are cut from",
    )
    p.add_argument("--time-scale", type=_positive_float, default=1.0, help="trace: x gaps")
    p.add_argument("--start-s", type=float, default=0.0, help="trace: window start, s")
    p.add_argument("--duration-s", type=_positive_float, default=None, help="trace: window")
    p.add_argument("--input-len", type=int, default=128, help="random dataset: words a prompt")
    p.add_argument("--shuffle-seed", type=int, default=None, help="seeded shuffle of prompts")


def _prompt_form_arguments(p: argparse.ArgumentParser) -> None:
    """What is sent of each prompt: whole conversations turn by turn, a length cap, a shared
    prefix."""
    p.add_argument(
        "--conversations",
        action="store_true",
        help="sharegpt, chat: replay whole conversations turn by turn, one session each",
    )
    p.add_argument("--max-turns", type=_positive_int, default=None, help="conversations: at most")
    p.add_argument(
        "--think-time-s", type=float, default=None, help="conversations: pause between turns"
    )
    p.add_argument(
        "--history",
        choices=HISTORIES,
        default=None,
        help="conversations: the answers a later turn carries, the dataset's (default: every "
        "server gets the same prompts) or the model's own",
    )
    p.add_argument(
        "--max-prompt-chars",
        type=int,
        default=None,
        help="sharegpt, jsonl: only prompts this short",
    )
    p.add_argument(
        "--shared-prefix-tokens",
        type=_positive_int,
        default=None,
        help="put one of --shared-prefix-count ShareGPT texts of about this many tokens "
        "(4 characters a token) before every prompt, round-robin",
    )
    p.add_argument("--shared-prefix-count", type=_positive_int, default=1)


def _load_arguments(p: argparse.ArgumentParser) -> None:
    """How much load and when: prompts, concurrency, arrivals, the time cap and its grace."""
    p.add_argument("--num-prompts", type=_positive_int, required=True)
    p.add_argument("--concurrency", type=_positive_int, required=True)
    p.add_argument(
        "--request-rate", type=_positive_float, default=None, help="Poisson arrivals, req/s"
    )
    p.add_argument("--arrival-seed", type=int, default=0)
    p.add_argument(
        "--max-seconds", type=_positive_float, default=None, help="no new request after this"
    )
    p.add_argument("--grace-s", type=float, default=30.0, help="in-flight time after the cap")
    p.add_argument("--request-timeout-s", type=_positive_float, default=600.0)


def _request_arguments(p: argparse.ArgumentParser) -> None:
    """What each request asks of the server, and how it is sent."""
    p.add_argument("--max-tokens", type=_positive_int, required=True)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument(
        "--no-record-outputs",
        dest="record_outputs",
        action="store_false",
        help="keep no answer text: every requests.jsonl record's `output` is null",
    )
    p.add_argument("--endpoint", choices=["chat", "completions"], default="chat")
    p.add_argument("--model", default=None, help="default: the first id of GET /v1/models")
    p.add_argument(
        "--api-key-env",
        type=_env_name,
        default=None,
        help="the environment variable holding the key to send (default: send none)",
    )
    p.add_argument("--warmup-requests", type=int, default=1)
    p.add_argument(
        "--extra-body",
        type=_json_object,
        default={},
        help="JSON object merged into every request body",
    )


def _run_arguments(p: argparse.ArgumentParser) -> None:
    """The client's processes, the goodput limits, the progress line and where results go."""
    p.add_argument(
        "--processes",
        type=_positive_int,
        default=None,
        help="client processes sharing the load (default: from the expected chunk "
        "rate, at most one a usable core)",
    )
    p.add_argument("--slo-ttft-ms", type=float, default=None, help="goodput: TTFT limit")
    p.add_argument("--slo-tpot-ms", type=float, default=None, help="goodput: TPOT limit")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--out", required=True, help="directory for metrics.json and requests.jsonl")


def served_model(base_url: str, api_key: str | None, timeout_s: float = 10.0) -> str | None:
    """The first model id the server lists, or None when it lists none (or has no such route)."""
    ep = Endpoint.from_base_url(base_url)
    conn_cls = http.client.HTTPSConnection if ep.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(ep.host, ep.port, timeout=timeout_s)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        conn.request("GET", f"{ep.prefix}/v1/models", headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            return None
        data = json.loads(body).get("data") or []
        return data[0].get("id") if data else None
    except (OSError, ValueError, AttributeError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def dataset_from_args(args: argparse.Namespace) -> Dataset:
    spec: dict[str, Any] = {"kind": args.dataset, "shuffle_seed": args.shuffle_seed}
    if args.dataset_path:
        spec["path"] = args.dataset_path
    if args.max_prompt_chars is not None:
        spec["max_prompt_chars"] = args.max_prompt_chars
    if args.dataset == "random":
        spec["input_len"] = args.input_len
    if args.conversations:
        if args.dataset != "sharegpt" or args.endpoint != "chat":
            raise DatasetError("--conversations: only with --dataset sharegpt and chat")
        spec["conversations"] = True
        for key in CONVERSATION_KEYS:
            if getattr(args, key) is not None:
                spec[key] = getattr(args, key)
    elif any(getattr(args, key) is not None for key in CONVERSATION_KEYS):
        raise DatasetError("--max-turns, --think-time-s, --history: only with --conversations")
    if args.think_time_s is not None and not args.think_time_s >= 0:
        raise DatasetError(f"--think-time-s: expected 0 or more, got {args.think_time_s}")
    if args.conversations and args.think_time_s and args.max_seconds:
        alone_s = think_time_alone_s(args.think_time_s, args.max_turns)
        if alone_s >= args.max_seconds:
            raise DatasetError(
                f"--think-time-s {args.think_time_s:g} between turns (--max-turns "
                f"{args.max_turns or 'unset: at least two'}) = {alone_s:g} s of think time "
                f"alone, at or past --max-seconds {args.max_seconds:g}: the time cap would cut "
                "every conversation before its last turn"
            )
    if args.dataset == "jsonl" and not args.dataset_path:
        raise DatasetError("--dataset jsonl needs --dataset-path")
    if args.dataset == "trace":
        if not args.dataset_path or not args.trace_format or args.request_rate:
            raise DatasetError(
                "--dataset trace needs --dataset-path and --trace-format, and takes its "
                "arrivals from the trace (no --request-rate)"
            )
        spec.update(format=args.trace_format, content=args.trace_content)
        spec.update(time_scale=args.time_scale, start_s=args.start_s, duration_s=args.duration_s)
    shared = args.shared_prefix_tokens
    prefix = {"tokens": shared, "count": args.shared_prefix_count} if shared else None
    return load_dataset(spec, args.num_prompts, prefix)


def summary(
    args: argparse.Namespace,
    spec: LoadSettings,
    dataset: Dataset,
    load: LoadResult,
    client: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """metrics.json: the output contract's names (docs/outputs.md) for what a load test alone can
    know."""
    slo = {k: v for k, v in (("ttft_ms", args.slo_ttft_ms), ("tpot_ms", args.slo_tpot_ms)) if v}
    metrics = compute_metrics(
        load.records,
        hit_time_cap=load.hit_time_cap,
        slo=slo or None,
        planned_turns=load.planned_turns,
    )
    done = metrics["completed"] > 0
    return {
        "status": Status.DONE if done else Status.FAILED,
        "reason": None if done else f"no request completed ({metrics['errors_by_reason']})",
        "base_url": args.base_url,
        "model": spec.model,
        "concurrency": spec.concurrency,
        "num_prompts": len(dataset.prompts),
        **metrics,
        "not_started": load.not_started,
        "dataset": {"kind": args.dataset, "source": dataset.source, "note": dataset.note},
        "dataset_sha256": dataset.sha256,
        "prompt_indices": [p.index for p in dataset.prompts],
        "load": spec.public(),
        "client": client,
        "clock_origin_s": load.clock_origin_s,
        "started_at": _iso(load.started_at),
        "finished_at": _iso(load.finished_at),
        "host": {
            "hostname": platform.node(),
            "cpu_count": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
    }


def _iso(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


def write_results(out: Path, result: dict[str, Any], load: LoadResult) -> None:
    """requests.jsonl first, metrics.json last: a metrics.json means the run is whole."""
    with atomic_open(out / "requests.jsonl") as handle:
        for record in load.records:
            handle.write(json.dumps(record.to_dict(), separators=(",", ":")) + "\n")
    write_json(out / "metrics.json", result)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    api_key = None
    if args.api_key_env:  # a key is sent only when its variable is named, never by default
        api_key = os.environ.get(args.api_key_env) or None
        if api_key is None:
            print(f"--api-key-env: ${args.api_key_env} is not set", file=sys.stderr)
            return 2
    out = Path(args.out)
    for stale in ("metrics.json", "requests.jsonl"):  # an earlier run's, never read as this one's
        (out / stale).unlink(missing_ok=True)
    try:
        dataset = dataset_from_args(args)
    except (DatasetError, OSError) as exc:
        print(f"dataset: {exc}", file=sys.stderr)
        return 2
    model = args.model or served_model(args.base_url, api_key)
    if model is None:
        print("note: the server lists no model; requests carry no model name", file=sys.stderr)
    spec = LoadSettings(
        base_url=args.base_url,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
        model=model,
        endpoint=args.endpoint,
        temperature=args.temperature,
        ignore_eos=args.ignore_eos,
        request_rate=args.request_rate,
        max_seconds=args.max_seconds,
        grace_s=args.grace_s,
        warmup_requests=args.warmup_requests,
        request_timeout_s=args.request_timeout_s,
        arrival_seed=args.arrival_seed,
        processes=args.processes,
        api_key=api_key,
        extra_body=args.extra_body,
        record_outputs=args.record_outputs,
    )
    use: list[UseSnapshot] = []  # this process's tree at the measured start and end

    def snapshot() -> None:
        use.append(take_snapshot(()))

    options = RunOptions(progress=args.progress, on_measure_start=snapshot, on_measure_end=snapshot)
    with sigterm_raises():  # SIGTERM unwinds like Ctrl-C: the load processes are ended, no result
        load = run_load(spec, dataset.prompts, options)
    choice = load.processes.to_dict() if load.processes else None
    client = client_use(use[0], use[-1], choice) if len(use) == 2 else None
    result = summary(args, spec, dataset, load, client)
    write_results(out, result, load)
    print(
        f"{result['completed']}/{result['num_prompts']} completed, {result['errors']} errors, "
        f"{result['incomplete']} incomplete in {result['duration_s']:.1f} s: "
        f"decode {result['decode_tok_s']:.1f} tok/s, prefill {result['prefill_tok_s']:.1f} tok/s"
        f" -> {args.out}",
        file=sys.stderr,
    )
    return 0 if result["status"] == Status.DONE else 1


if __name__ == "__main__":
    sys.exit(main())
