"""A sweep whose larger points fan the client out over several load processes, through the REAL
pipeline (`snakemake --cores 1`: the series' service job, run_cell on a shared server, the cell
rule's script run by Snakemake) against the STAND-IN law server (`fixtures/sweeps/law_server.py`,
a `native` llamacpp engine): no real server is fast enough on this machine to load 64 streams in a
few seconds, and the fault lives in the client's processes, not in the server.

Snakemake runs a rule's script as `__main__` with `__file__` pointing at `entry/cell.py`, which
defines nothing without Snakemake's preamble: a spawned load process must not re-run it (it did,
and every point from c33 up failed with a bare `EOFError`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.sweeps.law import Law
from tests.support.pipeline import run_snakemake, tiny_config, write_config
from workflow_scripts.loadgen.processes import choose_processes, usable_cores

pytestmark = [pytest.mark.standin]

LAW = Law(step_ms=10, step_per_stream_ms=1)  # a step of 74 ms at c64: a point takes seconds
MAX_TOKENS = 8
PROMPTS_PER_CONCURRENCY = 2
POINTS = [1, 8, 33, 64]
SERIES = "smollm2-135m__law__q4_1__none__sweep"


def config(data: Path) -> dict:
    workloads = {
        "sweep": {
            "dataset": {"kind": "jsonl", "path": str(data)},
            "num_prompts_per_concurrency": PROMPTS_PER_CONCURRENCY,
            "concurrency": POINTS,
            "max_tokens": MAX_TOKENS,
            "warmup_requests": 0,
            "max_seconds": 60,
            "grace_s": 5,
            "request_timeout_s": 30,
        }
    }
    cells = [
        {
            "matrix": {
                "model": ["smollm2-135m"],
                "engine": ["law"],
                "drafter": ["none"],
                "workload": ["sweep"],
            }
        }
    ]
    out = tiny_config(cells, workloads=workloads)
    out["engines"] = {"law": LAW.engine()}
    out["checks"] = {"other_cpu_percent_of_core": 400}
    return out


@pytest.fixture(scope="module")
def fan_out_run(tmp_path_factory):
    if usable_cores() < 2:
        pytest.skip("the client fans out only with 2 or more usable cores")
    workdir = tmp_path_factory.mktemp("sweep-fan-out")
    data = workdir / "prompts.jsonl"
    lines = (json.dumps({"prompt": f"prompt {i} of the sweep"}) + "\n" for i in range(200))
    data.write_text("".join(lines))
    write_config(workdir, config(data))
    proc = run_snakemake(workdir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return workdir


def test_every_point_is_done_and_the_client_fans_out_where_it_should(fan_out_run):
    """c1 and c8 in one process, c33 and c64 in more than one (the auto choice on this
    machine's cores), and each point measures all its prompts."""
    for c in POINTS:
        cell_dir = fan_out_run / "results/cells" / f"{SERIES}-c{c}"
        metrics = json.loads((cell_dir / "metrics.json").read_text())
        assert metrics["status"] == "done", (c, metrics.get("reason"))
        expected = choose_processes(c, cores=usable_cores())
        assert metrics["client"]["processes"] == expected.processes, c
        assert metrics["client"]["processes_source"] == "auto"
        assert (metrics["client"]["processes"] > 1) == (c >= 33), c
        if c >= 33:  # more than the parent: its load processes ran (and were measured)
            assert metrics["client"]["tree_processes"] > 1, c
        measured = [
            json.loads(line)
            for line in (cell_dir / "requests.jsonl").read_text().splitlines()
            if not json.loads(line).get("warmup")
        ]
        assert len(measured) == PROMPTS_PER_CONCURRENCY * c
        assert sorted(r["prompt_index"] for r in measured) == list(range(len(measured))), c
        assert all(r["status"] == "ok" for r in measured), c
