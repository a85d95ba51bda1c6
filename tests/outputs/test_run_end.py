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

from tests.support.config import default_config
from tests.support.pipeline import run_snakemake, tiny_config, write_config
from tests.support.run_end_table import end_table, table_rows
from workflow_scripts.outputs.compact import NOT_RUN, summary_row
from workflow_scripts.outputs.run_end import (
    TERMINAL_COLUMNS,
    print_run_end,
    read_rows,
    run_end_text,
    with_outputs_verdicts,
)
from workflow_scripts.workflow.dag import build_dag

SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "faults" / "scripted_server.py"
LONG_REASON = "ServerError: llama-server exited with code 1 before it was ready " + "x" * 200
DECODE, TTFT = 41.876, 135.04


def row(cell: str, status: str, **metrics) -> dict:
    return summary_row({"cell": cell, "status": status, **metrics})


def done(cell: str) -> dict:
    return row(cell, "done", decode_tok_s=DECODE, ttft_ms={"median": TTFT})


ROWS = [
    done("m__e__q__none__c2"),
    row("m__e__q__ngram__c2", "failed", reason=LONG_REASON + "\nTraceback: more", completed=0),
    row("m__e__q__ngram__c4", "blocked", reason="no trusted draft head"),
    row("m__e__q__none__c4", NOT_RUN),
]


def lines_of(rows, **kwargs) -> list[str]:
    return run_end_text(rows, "results/report.html", True, **kwargs).splitlines()


def test_rows_sit_under_their_model_and_engine_then_the_outcome_and_the_report():
    lines = lines_of(ROWS)
    assert lines[0] == ""  # apart from Snakemake's own log above it
    headers = ["cell", "status", "decode", "tok/s", "TTFT", "median", "ms", "reason"]
    assert lines[1].split() == headers  # `reason`: some reason fits beside its row
    assert lines[2] == "m__e__"  # the group's header: the id's first two parts
    shown = table_rows(lines[1:])
    assert [r.cell for r in shown] == [r["cell"] for r in ROWS]  # header + name = the full id
    assert shown[0].words == ["done", f"{DECODE:.2f}", f"{TTFT:.1f}"]
    assert shown[1].words == ["failed"] and shown[2].words[0] == "blocked"
    assert shown[3].words == ["not", "run"]
    # a reason too long for the row is wrapped below it, its first line only, cut with "..."
    assert (
        shown[1].reason_below.startswith(LONG_REASON[:90]) and shown[1].reason_below[-4:] == "x..."
    )
    assert "Traceback" not in "\n".join(lines)
    assert shown[2].reason() == "no trusted draft head" and not shown[2].reason_below
    # the figures line up under their headers' right ends
    done_line = next(line for line in lines if f"{TTFT:.1f}" in line)
    assert len(done_line) == lines[1].index("ms") + len("ms")
    assert done_line.index(f"{DECODE:.2f}") + len(f"{DECODE:.2f}") == lines[1].index("s  TTFT") + 1
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


def test_failed_cells_show_no_figures():
    crashed = row("c", "failed", reason="boom", decode_tok_s=12.0, ttft_ms={"median": 5.0})
    lines = lines_of([crashed])
    assert lines[2].split() == ["c", "failed", "boom"]  # an id of one part: in no group
    assert lines[1].split()[-1] == "reason"  # a reason that fits sits beside its row


def default_ids() -> list[str]:
    """The default matrix's cells and, for each search, its probes at the ends of its range
    and an extension (the longest ids a search makes)."""
    dag = build_dag(default_config())
    probes = [
        search.probe_id(key)
        for search in dag.searches.values()
        for key in [(search.settings.min, 0), (search.settings.max, search.settings.max_extensions)]
    ]
    return [*dag.cells, *probes]


def mixed_rows(ids: list[str]) -> list[dict]:
    """Every status in turn: done with figures, failed with a long reason, blocked, not run."""
    makers = [
        done,
        lambda cell: row(cell, "failed", reason=LONG_REASON),
        lambda cell: row(cell, "blocked", reason="no trusted draft head"),
        lambda cell: row(cell, NOT_RUN),
    ]
    return [makers[i % len(makers)](cell) for i, cell in enumerate(ids)]


def check_fits(lines: list[str], rows: list[dict], width: int = 80) -> None:
    """Every line within `width`; every row named by its full id, with its status, figures
    and reason."""
    assert max(len(line) for line in lines) <= width, "\n".join(lines)
    shown = {r.cell: r for r in table_rows(lines[1:])}
    assert sorted(shown) == sorted(r["cell"] for r in rows)
    for summary in rows:
        seen = shown[summary["cell"]]
        assert " ".join(seen.words).startswith(summary["status"])
        if summary["status"] == "done":
            assert seen.words[1:3] == [f"{DECODE:.2f}", f"{TTFT:.1f}"]
        if summary["reason"]:
            assert seen.reason().startswith(summary["reason"][:60])


def test_the_default_matrix_and_its_probes_fit_80_columns(empty_workdir):
    ids = default_ids()
    assert max(len(cell) for cell in ids) > 45  # the ids that made the old table ~95 wide
    rows = mixed_rows(ids)
    check_fits(lines_of(rows), rows)


def test_the_outputs_verdict_joins_where_the_run_compared_outputs(empty_workdir, tmp_path):
    """summary/fidelity.csv's verdict per cell (issue 36) is one more column, and the default
    matrix still fits; without the file the table is as before."""
    rows = mixed_rows(default_ids())
    assert with_outputs_verdicts(tmp_path, rows, TERMINAL_COLUMNS) == TERMINAL_COLUMNS
    (tmp_path / "summary").mkdir()
    verdicts = {r["cell"]: ("unchanged", "changed")[i % 2] for i, r in enumerate(rows)}
    lines = ["cell,verdict", *(f"{cell},{v}" for cell, v in verdicts.items())]
    (tmp_path / "summary" / "fidelity.csv").write_text("\n".join(lines) + "\n")
    columns = with_outputs_verdicts(tmp_path, rows, TERMINAL_COLUMNS)
    lines = lines_of(rows, columns=columns)
    check_fits(lines, rows)
    assert lines[1].split()[-1] == "outputs"
    shown = table_rows(lines[1:])
    assert [r.words[-1] for r in shown if r.words[0] == "blocked"] == [
        verdicts[s["cell"]] for s in rows if s["status"] == "blocked"
    ]


def test_long_ids_fit_whole_where_they_can_and_are_cut_in_the_middle_where_not():
    model = "a-model-with-a-very-long-name-" + "m" * 40  # its header alone fits 80
    rest_long = "q4_k_m__a-drafter-named-at-length-" + "d" * 60  # past 80 on its own
    rest_wide = "q4_0__ngram__" + "w" * 40  # fits 80, not beside the figures
    huge_model = "h" * 100
    rows = [
        done(f"{model}__engine__{rest_wide}"),
        row(f"{model}__engine__{rest_long}", "failed", reason=LONG_REASON),
        done(f"{huge_model}__engine__q__none__c1"),
        done(f"{model}__engine__q__none__c1"),
    ]
    lines = lines_of(rows)
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    shown = table_rows(lines[1:])
    assert [r.cell for r in shown if "..." not in r.cell] == [rows[0]["cell"], rows[3]["cell"]]
    assert f"  {rest_wide}" in lines  # a name on its own line, whole
    assert shown[0].words == ["done", f"{DECODE:.2f}", f"{TTFT:.1f}"]
    clipped = shown[1].cell  # both ends of the id still read
    assert clipped.startswith(f"{model}__engine__q4_k_m__a-drafter") and clipped.endswith("dddd")
    assert "..." in next(line for line in lines if line.startswith("hhh"))
    assert shown[1].reason_below.startswith(LONG_REASON[:60])
    assert shown[2].words[1:] == [f"{DECODE:.2f}", f"{TTFT:.1f}"]


def test_the_handler_fits_the_terminal_it_is_given(tmp_path, monkeypatch):
    ids = ["smollm2-135m__llamacpp-cpu__q4_0__ngram__sweep-c1", "m__e__q__none__c2"]
    reason = " ".join(f"word{i}" for i in range(30))  # short words: its lines fill the width
    for cell in ids:
        (tmp_path / "cells" / cell).mkdir(parents=True)
        (tmp_path / "cells" / cell / "metrics.json").write_text(
            json.dumps({"cell": cell, "status": "failed", "reason": reason})
        )
    for columns, width in [("60", 60), ("300", 80)]:
        monkeypatch.setenv("COLUMNS", columns)
        out = io.StringIO()
        print_run_end(str(tmp_path), ids, out)
        lines = out.getvalue().splitlines()
        assert lines[-1].startswith(f"Report: {tmp_path}")  # a path, never cut: not counted
        lines = lines[:-1]
        assert max(len(line) for line in lines) <= width
        assert max(len(line) for line in lines) > width - 8  # the reason takes the room
        assert [r.cell for r in table_rows(lines[1:])] == ids


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


@pytest.mark.standin
def test_the_run_ends_with_its_table_on_success_and_on_error_never_on_a_dry_run(standin_workdir):
    """Stand-in server: one cell answers, one crashes mid-run, one is blocked."""
    workdir = standin_workdir
    proc = run_snakemake(workdir)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    table = end_table(output)
    assert table[0].split()[:4] == ["cell", "status", "decode", "tok/s"]
    assert max(len(line) for line in table) <= 80  # no terminal here: 80 columns
    ok, crashed, blocked = table_rows(table)
    assert (ok.cell, ok.words[0]) == (DONE, "done") and float(ok.words[1]) > 0
    assert (crashed.cell, crashed.words[0]) == (FAILED, "failed")
    assert "server exited with code 3 while the load ran" in crashed.reason()
    assert (blocked.cell, blocked.words[0]) == (BLOCKED, "blocked")
    assert blocked.reason() == "a stand-in cell that is listed, never run"
    assert table[-2:] == ["1 of 3 cells failed; 1 blocked.", "Report: results/report.html"]
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
    shown = table_rows(table)
    assert [(r.cell, r.words[0]) for r in shown] == [
        (DONE, "failed"),
        (FAILED, "failed"),
        (BLOCKED, "blocked"),
    ]
    assert "invalid result" in shown[0].reason()
    assert table[-2:] == ["2 of 3 cells failed; 1 blocked.", "Report: results/report.html"]
