"""Server and input faults through the REAL pipeline (Snakemake, run_cell, the client, the
summary), in one run of an eight-cell matrix.

Server faults come from a STAND-IN server (`fixtures/faults/scripted_server.py`, launched as a
`native` llamacpp engine): each prompt scripts its answer (500, 503, malformed SSE, an error
object, a reset, no usage, a closed keep-alive connection, a hang, an exit mid-stream), which a
healthy llama-server cannot be made to do on demand. Dataset faults use the real llama.cpp
engine: they must stop the cell before it is ever started.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from tests.support.engines import left_behind
from tests.support.pipeline import planned_cells, run_snakemake, tiny_config, write_config

pytestmark = [pytest.mark.slow, pytest.mark.standin]

SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "faults" / "scripted_server.py"

MIXED = [
    "ok first",
    "fault:500 a",
    "fault:503 b",
    "fault:malformed-sse c",
    "fault:error-object d",
    "fault:reset e",
    "fault:no-usage f",
    "fault:close g",
    "ok h",
    "fault:503 i",
    "ok j",
]
MIXED_ERRORS = {
    "http_500": 1,
    "http_503": 2,
    "malformed_sse": 1,
    "stream_error": 1,
    "connection": 1,
}
NOT_STARTED = "(the server was never started)\n"


def cell(engine: str, workload: str) -> str:
    return f"smollm2-135m__{engine}__q4_1__none__{workload}"


def jsonl(path: Path, prompts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return path


def workload(path: Path, kind: str = "jsonl", num_prompts: int = 4, **extra) -> dict:
    return {
        "dataset": {"kind": kind, "path": str(path)},
        "num_prompts": num_prompts,
        "concurrency": 1,
        "max_tokens": 8,
        "warmup_requests": 0,
        "max_seconds": 60,
        "grace_s": 5,
        "request_timeout_s": 20,
        **extra,
    }


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("faults-standin")
    data = workdir / "data"
    data.mkdir()
    (data / "page.json").write_text("<!DOCTYPE html><html><body>Rate limited</body></html>\n")
    (data / "cut.json").write_text('[{"id": "a", "conversations": [{"from": "human", "value": "h')
    (data / "bad.jsonl").write_text('{"prompt": "one"}\n{"prompt": "two"\n{"prompt": "three"}\n')
    (data / "binary.jsonl").write_bytes(b'{"prompt": "x"}\n' + bytes(range(128, 256)))
    workloads = {
        "mixed": workload(
            jsonl(data / "mixed.jsonl", MIXED),
            num_prompts=len(MIXED),
            concurrency=2,
            warmup_requests=1,
        ),
        "crash": workload(jsonl(data / "crash.jsonl", ["ok 1", "ok 2", "fault:exit", "ok 3"])),
        "hang": workload(
            jsonl(data / "hang.jsonl", ["fault:hang 1", "fault:hang 2"]),
            num_prompts=2,
            concurrency=2,
            request_timeout_s=1,
        ),
        "not-json": workload(data / "page.json", kind="sharegpt"),
        "cut-early": workload(data / "cut.json", kind="sharegpt"),
        "bad-line": workload(data / "bad.jsonl", num_prompts=3),
        "binary": workload(data / "binary.jsonl"),
    }
    scripted = {
        "kind": "llamacpp",
        "launch": "native",
        "binary": f"{sys.executable} {SCRIPT}",
        "ready_timeout_s": 30,
    }
    config = tiny_config(
        [
            {"model": "smollm2-135m", "engine": "scripted", "workload": w}
            for w in ("mixed", "crash", "hang")
        ]
        + [{"model": "smollm2-135m", "engine": "listen-only", "workload": "mixed"}]
        + [
            {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": w}
            for w in ("not-json", "cut-early", "bad-line", "binary")
        ],
        workloads=workloads,
    )
    config["engines"]["scripted"] = scripted
    config["engines"]["listen-only"] = {
        **scripted,
        "ready_timeout_s": 2,
        "settings": {"fault_mode": "listen-only"},
    }
    config["checks"] = {"other_cpu_percent_of_core": 400}  # read by the cell, not its params
    write_config(workdir, config)
    proc = run_snakemake(workdir, "results/summary/summary.csv")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(workdir / "results/summary/summary.csv") as handle:
        rows = {row["cell"]: row for row in csv.DictReader(handle)}
    yield workdir, rows
    assert left_behind(str(SCRIPT)) == []


def metrics(workdir: Path, cell_id: str) -> dict:
    return json.loads((workdir / "results/cells" / cell_id / "metrics.json").read_text())


def test_500_503_and_broken_streams_are_counted_as_errors_never_as_completed(faulty_run):
    """Stand-in: 11 prompts scripted to 500, 503, malformed SSE, an error object, a reset, no
    usage, a closed keep-alive connection, or a healthy answer. The cell is a result (done),
    each fault counted under its kind, and only whole answers count as completed."""
    workdir, rows = faulty_run
    result = metrics(workdir, cell("scripted", "mixed"))
    assert result["status"] == "done", result.get("reason")
    assert result["errors_by_reason"] == MIXED_ERRORS
    assert result["errors"] == sum(MIXED_ERRORS.values())
    assert result["completed"] == 5 and result["incomplete"] == 0
    assert float(rows[cell("scripted", "mixed")]["errors"]) == sum(MIXED_ERRORS.values())
    records = [
        json.loads(line)
        for line in (workdir / "results/cells" / cell("scripted", "mixed") / "requests.jsonl")
        .read_text()
        .splitlines()
    ]
    by_prompt = {MIXED[r["prompt_index"]].split()[0]: r for r in records if not r["warmup"]}
    assert by_prompt["fault:no-usage"]["status"] == "ok"
    assert by_prompt["fault:no-usage"]["token_count_source"] != "usage"  # counted, and said so
    assert by_prompt["fault:close"]["status"] == "ok"
    assert {r["http_status"] for r in records if r["error"] == "http_503"} == {503}
    # the run's own checks, at the config's thresholds
    assert result["interference"]["cpu_threshold_percent_of_core"] == 400
    assert result["client"]["processes"] == 1 and result["client"]["processes_source"] == "auto"


def test_a_server_that_exits_during_load_fails_the_cell_with_its_exit(faulty_run):
    """Stand-in: the server exits (code 3) in the middle of the third answer."""
    workdir, rows = faulty_run
    result = metrics(workdir, cell("scripted", "crash"))
    assert result["status"] == "failed"
    assert "server exited with code 3 while the load ran" in result["reason"]
    assert "exiting mid-stream" in result["reason"]  # the log tail comes with it
    assert result["completed"] == 2  # recorded, but a failed cell's figures count nowhere
    assert rows[cell("scripted", "crash")]["status"] == "failed"


def test_a_server_that_answers_nothing_fails_the_cell_at_its_timeouts(faulty_run):
    """Stand-ins: one listens and never answers at all (readiness times out after the engine's
    2 s); the other is ready, then never answers a completion (each request times out)."""
    workdir, rows = faulty_run
    silent = metrics(workdir, cell("listen-only", "mixed"))
    assert silent["status"] == "failed"
    assert "server not ready after 2 s" in silent["reason"]
    assert "answering nothing" in silent["reason"]
    hung = metrics(workdir, cell("scripted", "hang"))
    assert hung["status"] == "failed"
    assert "no request completed ({'timeout': 2})" in hung["reason"]


@pytest.mark.parametrize(
    "workload_name,expected",
    [
        ("not-json", "ShareGPT file is not a JSON array (it begins '<!DOCTYPE html>"),
        ("cut-early", "no usable conversation (0 complete items parsed"),
        ("bad-line", "bad.jsonl:2: not JSON"),
        ("binary", "binary.jsonl: not UTF-8 text"),
    ],
)
def test_malformed_datasets_fail_the_cell_before_any_server_starts(
    faulty_run, workload_name, expected
):
    workdir, rows = faulty_run
    cell_id = cell("llamacpp-cpu", workload_name)
    result = metrics(workdir, cell_id)
    assert result["status"] == "failed"
    assert result["reason"].startswith("DatasetError: ")
    assert expected in result["reason"]
    assert "server_command" not in result  # stopped before a command was even built
    assert (workdir / "results/cells" / cell_id / "server.log").read_text() == NOT_STARTED
    assert rows[cell_id]["status"] == "failed" and expected in rows[cell_id]["reason"]


def test_failed_cells_are_retried_next_run_and_the_done_one_is_not(faulty_run):
    workdir, rows = faulty_run
    failed = {cell_id for cell_id, row in rows.items() if row["status"] == "failed"}
    assert len(failed) == 7
    assert planned_cells(workdir) == failed
    for cell_id in failed:
        counter = workdir / "results/failures" / f"{cell_id}.count"
        assert counter.read_text().strip() == "1"
