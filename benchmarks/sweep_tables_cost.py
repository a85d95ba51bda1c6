"""What the sweeps rule costs as a sweep multiplies cells: synthetic points (half of the series
with an n-gram drafter, each paired with its base series; 4 points a series, 200 requests a
point with a chunk per token, 2 % of the points failed) written as a results tree, then the
rule's body run on them as Snakemake would (reading every metrics.json and requests.jsonl,
building the tables, drawing the figures), timed by phase. `--summary` also times the
summary tables (aggregate) and figures on the same cells.

    python benchmarks/sweep_tables_cost.py --points 200 500 1000 [--summary]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workflow_scripts.config.matrix import load_cells  # noqa: E402
from workflow_scripts.loadgen.metrics import compute_metrics  # noqa: E402
from workflow_scripts.loadgen.records import ERROR, OK, RequestRecord  # noqa: E402
from workflow_scripts.outputs.record_index import read_index, write_index  # noqa: E402
from workflow_scripts.vocabulary import Status, SweepPoint, identity  # noqa: E402

LOADS = (1, 2, 4, 8)
REQUESTS = 200
FAILED_EVERY = 50  # one point in 50 failed


class Namespace(dict):
    """What a rule's script sees of `snakemake.input` / `.output` / `.params`."""

    __getattr__ = dict.__getitem__


def templates():
    """The default matrix's llama.cpp n-gram cell and its base."""
    cells = load_cells(REPO / "config.yaml")
    drafter = next(c for c in cells if c.has_drafter and c.engine.startswith("llamacpp"))
    key = (drafter.model, drafter.engine, drafter.quant)
    base = next(c for c in cells if not c.has_drafter and (c.model, c.engine, c.quant) == key)
    return base, drafter


def point(template, model: str, load: int):
    series = "__".join((model, template.engine, template.quant, template.drafter, "sweep"))
    return dataclasses.replace(
        template,
        id=f"{series}-c{load}",
        model=model,
        workload=f"sweep-c{load}",
        workload_spec=dataclasses.replace(template.workload_spec, concurrency=load),
        sweep=SweepPoint("sweep", "concurrency", load, series, shared_server=True),
    )


def records(rng: random.Random, load: int, drafter: bool) -> list[RequestRecord]:
    """A closed loop of `load` workers: TPOT grows with the load, a drafter sends several tokens
    a chunk and says its drafts in `timings` (as llama.cpp does)."""
    free = [0.0] * load
    out = []
    tpot = 0.02 * (1 + 0.15 * load) * (0.7 if drafter else 1.0)
    for i in range(REQUESTS):
        worker = min(range(load), key=free.__getitem__)
        tokens, ttft = rng.randint(16, 128), rng.uniform(0.05, 0.4) * (1 + 0.1 * load)
        step = tpot * rng.uniform(0.8, 1.25) * (3 if drafter else 1)
        chunks, t, sent = [], ttft, free[worker]
        for _ in range(0, tokens, 3 if drafter else 1):
            chunks.append(round(t, 6))
            t += step
        out.append(
            RequestRecord(
                index=i,
                prompt_index=i,
                status=OK,
                sent_s=sent,
                ttft_s=ttft,
                e2e_s=chunks[-1],
                chunk_times_s=chunks,
                prompt_tokens=rng.randint(20, 600),
                completion_tokens=tokens,
                finish_reason="length",
                http_status=200,
                timings={"draft_n": 4 * len(chunks), "draft_n_accepted": 2 * len(chunks)}
                if drafter
                else None,
            )
        )
        free[worker] = sent + chunks[-1]
    return out


def write_tree(root: Path, points: int, seed: int = 0) -> list:
    """`points` points (a multiple of 8: pairs of a base and a drafter series of 4 points)."""
    base, drafter = templates()
    rng = random.Random(seed)
    cells = []
    for pair in range(max(1, points // (2 * len(LOADS)))):
        for template in (base, drafter):
            for load in LOADS:
                cells.append(point(template, f"model-{pair}", load))
    for n, cell in enumerate(cells):
        folder = root / "cells" / cell.id
        folder.mkdir(parents=True)
        if n % FAILED_EVERY == FAILED_EVERY - 1:
            metrics = {**identity(cell), "status": Status.FAILED, "reason": "ServerError: died"}
            (folder / "requests.jsonl").write_text("")
        else:
            runs = records(rng, cell.concurrency, cell.has_drafter)
            runs[-1].status, runs[-1].error = ERROR, "http 500"
            metrics = {**identity(cell), "status": Status.DONE, **compute_metrics(runs)}
            if cell.has_drafter:
                metrics["spec"] = {
                    "acceptance_rate": 0.5,
                    "mean_acceptance_length": 3.0,
                    "draft_tokens": 4000.0,
                    "accepted_tokens": 2000.0,
                    "source": "metrics",
                }
            metrics["server_start"] = {
                "id": f"{cell.sweep.series}@0",
                "position": LOADS.index(cell.sweep.value) + 1,
                "pid": 1000 + n // len(LOADS),
                "ready_s": 2.0,
                "started_at": "2026-12-01T00:00:00Z",
            }
            lines = "".join(json.dumps(r.to_dict()) + "\n" for r in runs)
            (folder / "requests.jsonl").write_text(lines)
        (folder / "metrics.json").write_text(json.dumps(metrics))
    return cells


def rule_objects(root: Path, cells: list, outputs: dict[str, str]) -> Namespace:
    ids = [cell.id for cell in cells]
    index = root / "cells" / "records.json"  # what the records rule writes
    write_index(index, [root / "cells" / i / "metrics.json" for i in ids])
    return Namespace(
        input=Namespace(records=str(index)),
        params=Namespace(
            cells=json.dumps([cell.to_dict() for cell in cells]),
            gpus=json.dumps({i: 1 for i in ids}),
        ),
        output=Namespace(outputs),
    )


def sweep_outputs(out: Path) -> dict[str, str]:
    names = {
        **{f"{n}_{ext}": f"{n}.{ext}" for n in ("sweeps", "pareto", "spec_gain_sweep",
                                                "spec_crossover") for ext in ("csv", "md")},
        "sweeps_html": "sweeps.html",
        "pareto_plot": "pareto.png",
        "latency_plot": "sweep_latency.png",
        "spec_gain_plot": "spec_gain_sweep.png",
    }  # fmt: skip
    return {key: str(out / name) for key, name in names.items()}


def time_sweeps(root: Path, cells: list) -> dict[str, float]:
    from workflow_scripts.outputs.aggregate import cells_from_params
    from workflow_scripts.outputs.repeats import collapse_repeats
    from workflow_scripts.outputs.sweeps import files as sweep_files
    from workflow_scripts.outputs.sweeps import sweep_tables
    from workflow_scripts.outputs.writers import load_indexed

    sm = rule_objects(root, cells, sweep_outputs(root / "summary"))
    times, start = {}, time.perf_counter()
    metrics, records = load_indexed(read_index(sm.input.records))
    all_cells = cells_from_params(sm.params.cells)
    times["read"] = time.perf_counter() - start
    start = time.perf_counter()
    metrics, all_cells, records = collapse_repeats(metrics, all_cells, records)
    tables = sweep_tables(metrics, all_cells, records, json.loads(sm.params.gpus))
    sweep_files.write_sweep_tables(tables, sm.output)
    times["tables"] = time.perf_counter() - start
    start = time.perf_counter()
    sweep_files.write_sweep_figures(tables, sm.output)
    times["figures"] = time.perf_counter() - start
    start = time.perf_counter()
    cells_now, gpus = cells_from_params(sm.params.cells), json.loads(sm.params.gpus)
    sweep_files.write_sweep_outputs(sm.input.records, cells_now, gpus, sm.output)  # end to end
    times["rule"] = time.perf_counter() - start
    return times


def time_summary(root: Path, cells: list) -> dict[str, float]:
    from workflow_scripts.outputs.aggregate import (
        cells_from_params,
        draw_summary_figures,
        write_summary,
    )

    def aggregate(sm):  # entry/aggregate.py's calls
        write_summary(sm.input.records, cells_from_params(sm.params.cells), [], sm.output)

    def figures(sm):  # entry/summary_plots.py's calls
        draw_summary_figures(sm.input.records, cells_from_params(sm.params.cells), sm.output)

    out = root / "summary"
    names = ("summary", "index", "spec_gain")
    tables = {f"{n}_{ext}": str(out / f"{n}.{ext}") for n in names for ext in ("csv", "md")}
    tables |= {"summary_html": str(out / "summary.html"), "spec_gain_html": str(out / "sg.html")}
    figure_outputs = {
        k: str(out / f"{k}.png")
        for k in (
            "decode_plot",
            "latency_plot",
            "memory_plot",
            "spec_gain_plot",
            "concurrency_plot",
        )
    }
    times = {}
    for name, run, outputs in (
        ("summary tables", aggregate, tables),
        ("summary figures", figures, figure_outputs),
    ):
        start = time.perf_counter()
        run(rule_objects(root, cells, outputs))
        times[name] = time.perf_counter() - start
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, nargs="+", default=[200, 500, 1000])
    parser.add_argument("--summary", action="store_true", help="time the summary rules too")
    args = parser.parse_args()
    rows = []
    for points in args.points:
        with tempfile.TemporaryDirectory(prefix="sweep-cost-") as tmp:
            root = Path(tmp)
            start = time.perf_counter()
            cells = write_tree(root, points)
            made = time.perf_counter() - start
            size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20
            times = time_sweeps(root, cells)
            if args.summary:
                times |= time_summary(root, cells)
            rows.append((len(cells), size, made, times))
            print(f"{len(cells)} points: {times}", file=sys.stderr, flush=True)
    keys = list(rows[0][3])
    print("| points | results MiB | " + " | ".join(f"{k} s" for k in keys) + " |")
    print("|---" * (len(keys) + 2) + "|")
    for count, size, _, times in rows:
        print(f"| {count} | {size:.0f} | " + " | ".join(f"{times[k]:.1f}" for k in keys) + " |")


if __name__ == "__main__":
    main()
