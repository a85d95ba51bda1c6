"""The table a run ends with: a pure function of hand-made summary rows, the thin reader of each
cell's metrics.json, and the Snakefile's onsuccess/onerror handlers through the REAL Snakemake.

The end-to-end test runs a STAND-IN server (`fixtures/faults/scripted_server.py`, launched as a
`native` llamacpp engine, as the stand-in pipeline tests do): it answers or crashes on demand
with no llama.cpp build, so a run with a done, a failed and a blocked cell takes a minute."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from tests.support.pipeline import run_snakemake, tiny_config, write_config
from workflow_scripts.outputs.compact import NOT_RUN, summary_row
from workflow_scripts.outputs.run_end import print_run_end, read_rows, run_end_text

SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "faults" / "scripted_server.py"
LONG_REASON = "ServerError: llama-server exited with code 1 before it was ready " + "x" * 200


def row(cell: str, status: str, **metrics) -> dict:
    return summary_row({"cell": cell, "status": status, **metrics})


ROWS = [
    row("m__e__q__none__c2", "done", decode_tok_s=41.876, ttft_ms={"median": 135.04}),
    row("m__e__q__ngram__c2", "failed", reason=LONG_REASON + "\nTraceback: more", completed=0),
    row("m__e__q__ngram__c4", "blocked", reason="no trusted draft head"),
    row("m__e__q__none__c4", NOT_RUN),
]


def test_one_aligned_line_per_cell_then_the_outcome_and_the_report():
    text = run_end_text(ROWS, "results/report.html", report_exists=True)
    lines = text.splitlines()
    assert lines[0] == ""  # apart from Snakemake's own log above it
    assert lines[1].split() == ["cell", "status", "decode_tok_s", "ttft_median_ms", "reason"]
    assert lines[2].split() == ["m__e__q__none__c2", "done", "41.88", "135.0"]
    failed = lines[3]
    assert failed.split()[:3] == ["m__e__q__ngram__c2", "failed", "ServerError:"]
    assert failed.endswith("x...") and "Traceback" not in failed  # first line, clipped
    assert len(failed) < 140
    assert lines[4].split(None, 2) == ["m__e__q__ngram__c4", "blocked", "no trusted draft head"]
    assert lines[5].split() == ["m__e__q__none__c4", "not", "run"]
    # the figure columns line up: each row's numbers end where the header's do
    header_end = lines[1].index("ttft_median_ms") + len("ttft_median_ms")
    assert lines[2].rstrip().endswith("135.0") and len(lines[2].rstrip()) == header_end
    assert lines[-2:] == [
        "1 of 4 cells failed; 1 blocked; 1 not run.",
        "Report: results/report.html",
    ]


def test_a_clean_run_says_every_cell_is_done_and_a_missing_report_is_named():
    text = run_end_text(ROWS[:1], "out/report.html", report_exists=False)
    assert text.splitlines()[-2:] == [
        "1 of 1 cells done.",
        "Report: out/report.html (not written yet)",
    ]


def test_failed_cells_show_no_figures(tmp_path):
    crashed = row("c", "failed", reason="boom", decode_tok_s=12.0, ttft_ms={"median": 5.0})
    line = run_end_text([crashed], "r", True).splitlines()[2]
    assert line.split() == ["c", "failed", "boom"]


def test_reader_takes_each_cells_metrics_and_calls_a_missing_one_not_run(tmp_path):
    done = {"cell": "a", "status": "done", "decode_tok_s": 3.5, "engine_info": {"variant": "v"}}
    (tmp_path / "cells" / "a").mkdir(parents=True)
    (tmp_path / "cells" / "a" / "metrics.json").write_text(json.dumps(done))
    (tmp_path / "cells" / "c").mkdir(parents=True)
    (tmp_path / "cells" / "c" / "metrics.json").write_text("{not json")
    rows = read_rows(tmp_path, ["a", "b", "c"])
    assert [(r["cell"], r["status"]) for r in rows] == [
        ("a", "done"),
        ("b", NOT_RUN),
        ("c", NOT_RUN),
    ]
    assert rows[0]["decode_tok_s"] == 3.5 and rows[0]["build_variant"] == "v"
    assert "metrics.json" in rows[2]["reason"]


def test_a_slip_in_the_handler_never_fails_the_run(tmp_path):
    (tmp_path / "cells" / "a").mkdir(parents=True)
    (tmp_path / "cells" / "a" / "metrics.json").write_text("[]")  # JSON, but not a record
    out = io.StringIO()
    print_run_end(str(tmp_path), ["a"], out)
    assert out.getvalue().startswith("(no result table: ")


# --- the handlers through the real Snakemake, on a stand-in server ------------------------------

DONE = "standin__scripted__q0__none__ok"
FAILED = "standin__scripted__q0__none__crash"
BLOCKED = "standin__scripted__q0__none__blocked"


def jsonl(path: Path, prompts: list[str]) -> dict:
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return {
        "dataset": {"kind": "jsonl", "path": str(path)},
        "num_prompts": len(prompts),
        "concurrency": 1,
        "max_tokens": 8,
        "warmup_requests": 0,
        "max_seconds": 60,
        "grace_s": 5,
        "request_timeout_s": 20,
    }


@pytest.fixture(scope="module")
def standin_workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("run-end")
    (workdir / "standin.gguf").write_bytes(b"GGUF stand-in: the scripted server never reads it")
    workloads = {
        "ok": jsonl(workdir / "ok.jsonl", ["ok 1", "ok 2"]),
        "crash": jsonl(workdir / "crash.jsonl", ["ok 1", "fault:exit", "ok 2"]),
        "blocked": jsonl(workdir / "blocked.jsonl", ["ok 1"]),
    }
    models = {
        "standin": {
            "quants": {
                "q0": {"weights": {"source": "local", "path": str(workdir / "standin.gguf")}}
            }
        }
    }
    config = tiny_config(
        [
            {"model": "standin", "engine": "scripted", "workload": "ok"},
            {"model": "standin", "engine": "scripted", "workload": "crash"},
            {
                "model": "standin",
                "engine": "scripted",
                "workload": "blocked",
                "blocked": "a stand-in cell that is listed, never run",
            },
        ],
        workloads=workloads,
        models=models,
    )
    config["engines"]["scripted"] = {
        "kind": "llamacpp",
        "launch": "native",
        "binary": f"{sys.executable} {SCRIPT}",
        "ready_timeout_s": 30,
    }
    write_config(workdir, config)
    return workdir


def end_table(output: str) -> list[str]:
    """The last table in Snakemake's output: its header line to the report's line."""
    lines = output[output.rindex("\ncell ") + 1 :].splitlines()
    return lines[: next(i for i, line in enumerate(lines) if line.startswith("Report: ")) + 1]


@pytest.mark.standin
def test_the_run_ends_with_its_table_on_success_and_on_error_never_on_a_dry_run(standin_workdir):
    """Stand-in server: one cell answers, one crashes mid-run, one is blocked."""
    workdir = standin_workdir
    proc = run_snakemake(workdir)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    table = end_table(output)
    assert table[0].split()[:3] == ["cell", "status", "decode_tok_s"]
    assert table[1].split()[:2] == [DONE, "done"] and float(table[1].split()[2]) > 0
    assert table[2].split()[:2] == [FAILED, "failed"]
    assert "server exited with code 3 while the load ran" in table[2]
    assert table[3].split(None, 2) == [
        BLOCKED,
        "blocked",
        "a stand-in cell that is listed, never run",
    ]
    assert table[4:] == ["1 of 3 cells failed; 1 blocked.", "Report: results/report.html"]
    assert (workdir / "results" / "report.html").exists()

    # Snakemake calls neither handler for a dry run (nor when there is nothing to be done:
    # test_report_html's second run; here the failed cell is retried by every run).
    dry = run_snakemake(workdir, "-n", "--forcerun", "aggregate")
    assert dry.returncode == 0 and "aggregate" in dry.stdout + dry.stderr
    assert "cells failed" not in dry.stdout + dry.stderr

    # A job that fails ends the run in onerror: here the summary tables' job, which cannot open
    # its log (a folder stands where the log goes). The done cell's request log is made one no
    # reader can parse: the end table reads that cell as the tables do, failed, not done.
    (workdir / "results" / "cells" / DONE / "requests.jsonl").write_text("not json\n")
    (workdir / "logs" / "aggregate.log").unlink(missing_ok=True)
    (workdir / "logs" / "aggregate.log" / "in-the-way").mkdir(parents=True)
    broken = run_snakemake(workdir)
    output = broken.stdout + broken.stderr
    assert broken.returncode != 0, output[-4000:]
    table = end_table(output)
    assert [line.split()[1] for line in table[1:4]] == ["failed", "failed", "blocked"]
    assert "invalid result" in table[1]
    assert table[4:] == ["2 of 3 cells failed; 1 blocked.", "Report: results/report.html"]
