"""Conversations against a prefix cache through the REAL pipeline (Snakemake, the cells, metrics,
by_turn, comparisons, the cards, the front page), with a STAND-IN server
(`fixtures/sweeps/law_server.py`, launched as a `native` llamacpp engine): no real server's
prefix cache reuses a known number of tokens in a known time, so no real run could check a hit
rate or a TTFT by turn against an exact reference. The stand-in's slots keep their last prompt,
a request reuses its common prefix with it and prefills the rest at a known cost per token
(`fixtures/sweeps/law.py`), so every figure by turn is known in closed form.

One law, two engine entries: `law-cache` (the cache on) and `law-nocache` (the same entry with
the llama.cpp adapter's cache-off settings, `--no-cache-prompt --cache-ram 0`). One workload:
a ShareGPT file of our own, replayed as whole conversations, one at a time (one slot), so the
prompts reach the slot in a known order: the cell's readiness probe first, then each
conversation's turns in order. A copy of the finished run, one cell's metrics.json cut short,
shows that cell measured again.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import statistics
from pathlib import Path

import pytest

from tests.fixtures.sweeps.law import Law, Reuse, chat_text, hit_pct
from tests.support.engines import left_behind
from tests.support.pipeline import run_snakemake, tiny_config, write_config
from workflow_scripts.engines import adapter_for

pytestmark = [pytest.mark.standin]

# step(1) = 10 ms; prefill 3 + 6 ms per evaluated token (odd, so never on a step's end: float
# rounding cannot move a first token by a step). A cached later turn's TTFT is 50 ms or more below
# its uncached one, far past the tolerance; even a first turn, which the cache spares only the
# template's head (2 tokens, 12 ms of prefill), gets its first token a step (10 ms) sooner.
LAW = Law(step_ms=8, step_per_stream_ms=2, prefill_ms=3, prefill_per_token_ms=6, prefix_cache=True)
MAX_TOKENS = 4
MAX_TURNS = 3
# Measured TTFT (client send to first chunk) may trail the law's by the HTTP round trip and the
# loop's wake-up on a shared machine, never lead it (tests/loadgen/test_law_prefix_cache.py).
EARLY_MS, LATE_MS = 1.0, 25.0
PROBE = "Hi"  # cell/run.py's readiness probe: one user message, the first prompt a slot takes
HUMANS = (3, 3, 2, 4)  # human turns per conversation: the last one is cut at MAX_TURNS
CACHE, NOCACHE = "law-cache", "law-nocache"


def words(tag: str, count: int) -> str:
    return " ".join(f"{tag}w{i}" for i in range(count))


def conversation(c: int) -> list[tuple[str, str]]:
    """(human, gpt) pairs of known words, lengths varying by conversation; every word is the
    conversation's own, so a first turn shares only the template's head with the slot's last
    prompt."""
    return [(words(f"c{c}h{t}", 6 + c), words(f"c{c}g{t}", 10 + 2 * c)) for t in range(HUMANS[c])]


CONVERSATIONS = [conversation(c) for c in range(len(HUMANS))]


def sharegpt(talks: list[list[tuple[str, str]]]) -> list[dict]:
    return [
        {
            "id": f"talk{c}",
            "conversations": [
                {"from": who, "value": text}
                for human, gpt in talk
                for who, text in (("human", human), ("gpt", gpt))
            ],
        }
        for c, talk in enumerate(talks)
    ]


def sent() -> list[tuple[int, str]]:
    """(turn, the contents the server templates) of each request in send order: conversation by
    conversation, turn k carrying its first k human turns and the dataset's answers between."""
    out = []
    for talk in CONVERSATIONS:
        for turn in range(1, min(len(talk), MAX_TURNS) + 1):
            contents = [text for human, gpt in talk[: turn - 1] for text in (human, gpt)]
            out.append((turn, chat_text([*contents, talk[turn - 1][0]])))
    return out


def closed_form(on: bool) -> list[tuple[int, Reuse]]:
    """(turn, cache_n / prompt_n) of each request, after the probe that took the slot first."""
    requests = sent()
    reuses = LAW.prompt_cache([chat_text([PROBE])] + [t for _, t in requests], slots=1, on=on)
    return [(turn, reuse) for (turn, _), reuse in zip(requests, reuses[1:], strict=True)]


def cell(engine: str) -> str:
    return f"smollm2-135m__{engine}__q4_1__none__talk"


def config(data: Path) -> dict:
    workload = {
        "dataset": {
            "kind": "sharegpt",
            "path": str(data),
            "conversations": True,
            "max_turns": MAX_TURNS,
        },
        "num_prompts": len(CONVERSATIONS),
        "concurrency": 1,
        "max_tokens": MAX_TOKENS,
        "warmup_requests": 0,
        "max_seconds": 60,
        "grace_s": 5,
        "request_timeout_s": 20,
    }
    out = tiny_config(
        [
            {
                "matrix": {
                    "model": ["smollm2-135m"],
                    "engine": [CACHE, NOCACHE],
                    "drafter": ["none"],
                    "workload": ["talk"],
                }
            }
        ],
        workloads={"talk": workload},
    )
    on = LAW.engine()
    off = {**on, "settings": {**on["settings"], **adapter_for("llamacpp").prefix_cache_off}}
    out["engines"] = {CACHE: on, NOCACHE: off}
    out["checks"] = {"other_cpu_percent_of_core": 400}
    return out


@pytest.fixture(scope="module")
def talk_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("conversation-standin")
    data = workdir / "talks.json"
    data.write_text(json.dumps(sharegpt(CONVERSATIONS)))
    write_config(workdir, config(data))
    proc = run_snakemake(workdir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # this law's servers only (both cells' commands carry its flags as `Law.argv` renders
    # them): other runs may have law stand-ins of their own up
    marker = " ".join(LAW.argv())
    for engine in (CACHE, NOCACHE):
        command = " ".join(metrics(workdir, engine)["server_command"])
        assert marker in command and "--parallel 1 " in command  # one slot: the closed form's
    yield workdir
    assert left_behind(marker) == []


def by_turn_rows(workdir: Path, engine: str) -> list[dict[str, str]]:
    with open(workdir / "results/summary/by_turn.csv") as handle:
        return [row for row in csv.DictReader(handle) if row["cell"] == cell(engine)]


def metrics(workdir: Path, engine: str) -> dict:
    return json.loads((workdir / "results/cells" / cell(engine) / "metrics.json").read_text())


def test_the_closed_form_tells_the_cache_apart():
    """The reference itself: a later turn reuses all of its conversation's last prompt, a first
    turn only the template's head; without the cache nothing; each later turn's cached TTFT lies
    more than the tolerance below its uncached one, each first turn's a step below."""
    on, off = closed_form(True), closed_form(False)
    assert [turn for turn, _ in on] == [1, 2, 3, 1, 2, 3, 1, 2, 1, 2, 3]
    assert on[0][1].cache_n == 2  # after the probe: BOS and `<|user|>`
    for (turn, reuse), (_, before) in zip(on[1:], on, strict=False):
        if turn > 1:
            assert reuse.cache_n == before.cache_n + before.prompt_n
        else:
            assert reuse.cache_n == 2  # BOS and `<|user|>`
    assert all(reuse.cache_n == 0 for _, reuse in off)
    for (turn, cached), (_, whole) in zip(on, off, strict=True):
        assert cached.cache_n + cached.prompt_n == whole.prompt_n
        gap = LAW.ttft_ms(1, uncached=whole.prompt_n) - LAW.ttft_ms(1, uncached=cached.prompt_n)
        assert gap > LATE_MS + EARLY_MS if turn > 1 else gap >= LAW.step_time_ms(1)


@pytest.mark.parametrize("engine,on", [(CACHE, True), (NOCACHE, False)])
def test_by_turn_is_the_closed_form(talk_run, engine, on):
    """by_turn.csv: a row per turn, its request count, its hit % exactly the closed form's, its
    TTFT median within the tolerance of the closed form's median for that turn."""
    rows = by_turn_rows(talk_run, engine)
    reuses = closed_form(on)
    turns = sorted({turn for turn, _ in reuses})
    assert [int(row["turn"]) for row in rows] == turns
    for row in rows:
        mine = [reuse for turn, reuse in reuses if turn == int(row["turn"])]
        assert row["prefix_cache"] == ("on" if on else "off")
        assert int(row["requests"]) == len(mine)
        known = hit_pct(mine)
        assert float(row["prefix_cache_hit_pct"]) == known
        if not on:
            assert known == 0
        elif int(row["turn"]) > 1:
            assert known > 0
        expected = statistics.median(LAW.ttft_ms(1, uncached=r.prompt_n) for r in mine)
        measured = float(row["ttft_median_ms"])
        assert expected - EARLY_MS <= measured <= expected + LATE_MS, (row["turn"], measured)


@pytest.mark.parametrize("engine,on", [(CACHE, True), (NOCACHE, False)])
def test_metrics_say_conversation_and_the_whole_runs_hit_rate(talk_run, engine, on):
    """metrics.json: the run's hit % the closed form's, the cache state, the content label;
    every request record names its session and turn, in the closed form's order."""
    found = metrics(talk_run, engine)
    reuses = closed_form(on)
    assert found["status"] == "done"
    assert found["prefix_cache_hit_pct"] == hit_pct(r for _, r in reuses)
    assert found["prefix_cache"] == ("on" if on else "off")
    assert found["content"] == "conversation"
    lines = (talk_run / "results/cells" / cell(engine) / "requests.jsonl").read_text()
    records = [json.loads(line) for line in lines.splitlines() if line.strip()]
    assert all(r.get("session") is not None and r.get("turn") is not None for r in records)
    assert [r["turn"] for r in records] == [turn for turn, _ in reuses]
    assert [r["timings"]["cache_n"] for r in records] == [r.cache_n for _, r in reuses]
    # every conversation whole: its turns as planned (the last one cut at MAX_TURNS), each sent
    turns = len(reuses)
    assert found["turns"] == {
        "planned": turns,
        "sent": turns,
        "completed": turns,
        "not_sent_after_failure": 0,
        "cut_by_time_cap": 0,
    }
    talks = len(CONVERSATIONS)
    assert found["conversations"] == {
        "planned": talks,
        "completed": talks,
        "stopped_by_failure": 0,
        "cut_by_time_cap": 0,
        "stops": [],
    }


def test_the_index_counts_turns_and_conversations_apart(talk_run):
    """index.csv's Completed: 11 of 11 turns and 4 of 4 conversations (before: `11/4`)."""
    with open(talk_run / "results/summary/index.csv") as handle:
        rows = {row["Configuration"]: row for row in csv.DictReader(handle)}
    turns, talks = len(closed_form(True)), len(CONVERSATIONS)
    for engine in (CACHE, NOCACHE):
        assert (
            rows[cell(engine)]["Completed"]
            == f"{turns}/{turns} turns, {talks}/{talks} conversations"
        )


def pair_rows(workdir: Path) -> dict[str, dict[str, str]]:
    """comparisons.csv's rows of the two cells, by figure."""
    with open(workdir / "results/summary/comparisons.csv") as handle:
        return {
            row["figure"]: row
            for row in csv.DictReader(handle)
            if {row["a_cell"], row["b_cell"]} == {cell(CACHE), cell(NOCACHE)}
        }


def test_the_cache_off_cell_is_slower_in_ttft(talk_run):
    """comparisons.csv: A is the cache-on cell (first in the config), and B, the cache off, is
    decisively slower in TTFT median."""
    ttft = pair_rows(talk_run)["ttft_median_ms"]
    assert (ttft["a_cell"], ttft["b_cell"]) == (cell(CACHE), cell(NOCACHE))
    assert float(ttft["b_value"]) > float(ttft["a_value"])
    assert float(ttft["change_pct"]) > 0
    assert ttft["verdict"] == "slower", (ttft["interval_method"], ttft["interval_basis"])


def test_the_two_cells_compare_as_a_prefix_cache_pair(talk_run):
    """The two engine entries differ only in the cache settings: one setup digest in their
    metrics.json, and comparisons.csv's axis `prefix cache` on every figure."""
    on, off = metrics(talk_run, CACHE), metrics(talk_run, NOCACHE)
    rows = pair_rows(talk_run)
    assert rows and {row["axis"] for row in rows.values()} == {"prefix cache"}
    assert on["engine_setup_sha256"] == off["engine_setup_sha256"]


def test_the_ttft_change_is_that_of_the_medians_shown(talk_run):
    """The row's change is B's TTFT median against A's, the medians it shows: requests pair by
    prompt and turn (RequestRecord.pair_key), so every turn of every conversation is paired,
    not only each conversation's first."""
    ttft = pair_rows(talk_run)["ttft_median_ms"]
    shown = 100 * (float(ttft["b_value"]) / float(ttft["a_value"]) - 1)
    assert float(ttft["change_pct"]) == pytest.approx(shown, rel=1e-6)


def test_the_card_and_the_front_page_show_conversations(talk_run):
    """The cache-on cell's card has its turns; the front page has a Conversations section."""
    card = (talk_run / "results/cells" / cell(CACHE) / "card.md").read_text()
    assert "## Conversations by turn" in card
    overview = (talk_run / "results/summary/overview.html").read_text()
    assert "<h2>Conversations</h2>" in overview


_JOB = re.compile(r"^(?:local)?rule (\w+):$")


def cells_measured(proc) -> list[str]:
    """The `cell` wildcard of each job of rule `cell` a run (or dry run) printed."""
    out, rule = [], None
    for line in (proc.stdout + proc.stderr).splitlines():
        line = line.strip()
        if match := _JOB.match(line):
            rule = match.group(1)
        elif rule == "cell" and line.startswith("wildcards: cell="):
            out.append(line.split("=", 1)[1])
    return out


def test_a_cut_short_metrics_json_is_named_and_the_cell_measured_again(talk_run, tmp_path):
    """A copy of the finished run with the cache-off cell's metrics.json cut short (a full disk,
    a killed copy): a dry run names it and leaves it; a run names it, measures that cell alone
    again and remakes its card. Before, the cell read as done and its card failed with a
    traceback on every run."""
    workdir = tmp_path / "copy"
    shutil.copytree(talk_run, workdir, symlinks=True)
    cut = workdir / "results/cells" / cell(NOCACHE) / "metrics.json"
    cut.write_text(cut.read_text()[:40])
    named = f"{cut.relative_to(workdir)} does not parse (JSONDecodeError"
    dry = run_snakemake(workdir, "-n")
    assert dry.returncode == 0 and "Traceback" not in dry.stderr, dry.stderr[-3000:]
    assert named in dry.stderr and "a run marks the cell failed and measures it again" in dry.stderr
    assert len(cut.read_text()) == 40
    proc = run_snakemake(workdir)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in said, said[-3000:]
    assert named in said and "the cell is marked failed and measured again" in said
    assert cells_measured(proc) == [cell(NOCACHE)], said[-3000:]
    assert metrics(workdir, NOCACHE)["status"] == "done"
    card = workdir / "results/cells" / cell(NOCACHE) / "card.md"
    assert card.stat().st_mtime >= cut.stat().st_mtime
    again = run_snakemake(workdir, "-n")  # measured whole: nothing more to do
    assert again.returncode == 0 and cells_measured(again) == []
    assert left_behind(" ".join(LAW.argv())) == []
