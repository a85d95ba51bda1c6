"""What a matrix's content and conversations add to the outputs: the content label of each
dataset kind, the summary's cache columns, the drafter's gain by content, conversations by
turn, prefix-cache pairs, the card's rows and sections, the front page's two answers and the
aggregate rule's two tables. Cells come from a written config (tests/support/content_matrix.py);
their metrics are hand-made, every figure checked against one computed here from them."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import yaml

from tests.support.config import REPO
from tests.support.content_matrix import cell_id, content_cells, done_metrics, turn
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.loadgen.records import ERROR, INCOMPLETE, OK, RequestRecord
from workflow_scripts.outputs import card as cards
from workflow_scripts.outputs import front_page, labels, writers
from workflow_scripts.outputs.card.measured import (
    by_turn_section,
    measured_rows,
    prefix_cache_value,
    spec_section,
)
from workflow_scripts.outputs.card.model import fmt
from workflow_scripts.outputs.cell_pairs import (
    ENGINE,
    ENGINE_QUANT,
    PREFIX_CACHE,
    QUANT,
    cache_only,
    pair_axis,
)
from workflow_scripts.outputs.compact import (
    compact_view,
    completed_text,
    number_text,
    summary_row,
)
from workflow_scripts.outputs.conversations import BY_TURN_COLUMNS, by_turn_table
from workflow_scripts.outputs.repeats import combine
from workflow_scripts.outputs.spec_gain import (
    GAIN_BY_CONTENT_COLUMNS,
    RANDOM_TOKENS_FLAG,
    gain_by_content,
    spec_gain_table,
)
from workflow_scripts.outputs.tables import index_table, summary_frame, summary_rows
from workflow_scripts.vocabulary import CONTENT_OF_KIND, RANDOM_TOKENS, Status, identity
from workflow_scripts.workflow.dag import build_dag

CHAT, CODE = CONTENT_OF_KIND["sharegpt"], CONTENT_OF_KIND["humaneval"]
# workload -> the label its dataset settings give (config: tests/support/content_matrix.py)
LABELS = {
    "chat": CHAT,
    "conv": "conversation",
    "code": CODE,
    "rand": RANDOM_TOKENS,
    "file": "jsonl",
    "trace-code": f"trace: {CODE}",
    "trace-chat": f"trace: {CHAT}",
}
DRAFTED = ("chat", "code", "rand")  # the workloads the n-gram drafter ran on beside its base


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    return content_cells(tmp_path_factory.mktemp("content"))


def cell(cells, engine, drafter, workload):
    return cells[cell_id(engine, drafter, workload)]


def points(cells) -> list[str]:
    return [c.id for c in cells.values() if c.sweep is not None]


def drafter_pair(cells, workload: str, base_tok_s: float, drafter_tok_s: float) -> list[dict]:
    """A base and its n-gram drafter cell on `workload`, done at these decode rates."""
    base = done_metrics(cell(cells, "lc", "none", workload), decode_tok_s=base_tok_s)
    spec = {"acceptance_rate": drafter_tok_s / (base_tok_s + drafter_tok_s)}
    drafter = cell(cells, "lc", "ngram", workload)
    return [base, done_metrics(drafter, decode_tok_s=drafter_tok_s, spec=spec)]


def conversation(cells, engine: str, hits: list[float] | None) -> dict:
    """A done conversation cell with three turns, later turns slower to start without the
    cache; `hits` the per-turn hit % (None: the engine reported none)."""
    turns = []
    for k in (1, 2, 3):
        ttft = [0.010 * k * j for j in (1, 2, 3, 5)]
        extra = {} if hits is None else {"prefix_cache_hit_pct": hits[k - 1]}
        turns.append(turn(k, ttft, [0.002 * k + 0.001 * j for j in range(4)], **extra))
    state = "off" if engine.endswith("-off") else "on"
    return done_metrics(cell(cells, engine, "none", "conv"), by_turn=turns, prefix_cache=state)


# --- the content label -------------------------------------------------------------------


def test_each_dataset_kind_names_its_content_and_metrics_carry_it(cells):
    seen = {}
    for c in cells.values():
        label = c.workload_spec.dataset.content_label
        assert identity(c)["content"] == label
        seen.setdefault(c.workload_name, set()).add(label)
    assert seen == {**{w: {label} for w, label in LABELS.items()}, "sweep": {CODE}}
    assert len(set(LABELS.values())) == len(LABELS)  # no two contents read alike
    assert RANDOM_TOKENS == "random tokens" and (CHAT, CODE) == ("chat", "code")


# --- summary.csv and summary.md ----------------------------------------------------------


def test_the_cache_hit_column_shows_only_when_some_cell_has_one(cells):
    base = done_metrics(cell(cells, "lc", "none", "conv"), prefix_cache="on")
    off = done_metrics(cell(cells, "lc-off", "none", "conv"), prefix_cache="off")
    rows = [summary_row(base), summary_row(off)]
    assert [(r["content"], r["prefix_cache"]) for r in rows] == [
        ("conversation", "on"),
        ("conversation", "off"),
    ]
    headers, _ = compact_view(rows)
    assert "cache_hit_pct" not in headers
    hit = 41.25
    rows[0] = summary_row({**base, "prefix_cache_hit_pct": hit})
    headers, view = compact_view(rows)
    assert headers.index("tpot_median_ms") < headers.index("cache_hit_pct")
    assert headers.index("cache_hit_pct") < headers.index("peak_mem_gib")
    assert [row["cache_hit_pct"] for row in view] == [number_text(hit, 1), ""]


# --- spec_gain and gain_by_content -------------------------------------------------------


def talk_records(planned: list[int], sent: list[list[str]]) -> list[RequestRecord]:
    """Hand-made records of conversations: `sent[s]` the statuses of session s's turns in
    order (fewer than `planned[s]` where it ended early)."""
    records = []
    for session, statuses in enumerate(sent):
        for number, status in enumerate(statuses, start=1):
            error = "http_500" if status == ERROR else None
            records.append(
                RequestRecord(
                    len(records), session, status, error=error, session=session, turn=number
                )
            )
    return records


# (planned turns by conversation, each one's sent turns, the cap hit) -> the completed count
COUNTED = [
    ([3] + [2] * 7, [[OK] * 3] + [[OK] * 2] * 7, False, "17/17 turns, 8/8 conversations"),
    (
        [4, 4, 3, 3],
        [[OK]] * 4,
        True,
        "4/14 turns, 0/4 conversations, hit the time cap (10 turns never ran)",
    ),
    (
        [4, 4, 3],
        [[OK, ERROR], [OK, OK, OK, OK], [OK, INCOMPLETE]],
        True,
        "6/11 turns, 1/3 conversations, 1 errors (2 turns after them not sent), 1 incomplete, "
        "hit the time cap (1 turn never ran)",
    ),
]


@pytest.mark.parametrize("planned,sent,capped,expected", COUNTED, ids=["done", "capped", "both"])
def test_a_conversation_cells_completed_count_says_turns_and_conversations(
    cells, planned, sent, capped, expected
):
    """The index, summary.md (the compact view, also the table a run ends with) and the card
    count a conversation cell's turns and conversations apart, from metrics.json's counts;
    before, the index read `17/8` (turns over conversations) and `4/4, hit the time cap` for a
    run that sent 4 of 14 turns. A cell of single prompts keeps `6/6`."""
    records = talk_records(planned, sent)
    figures = compute_metrics(records, hit_time_cap=capped, planned_turns=planned)
    conv = cell(cells, "lc", "none", "conv")
    metrics = done_metrics(conv, **{**figures, "num_prompts": len(planned), "duration_s": 2.0})
    rows = summary_rows([metrics])
    assert index_table(summary_frame(rows)).loc[0, "Completed"] == expected
    headers, view = compact_view(rows)
    assert view[0][headers[headers.index("completed")]] == expected
    assert cards.measured.completed_value(metrics) == expected + ", 2.0 s"
    plain = done_metrics(cell(cells, "lc", "none", "chat"), completed=6, num_prompts=6)
    assert index_table(summary_frame(summary_rows([plain]))).loc[0, "Completed"] == "6/6"


def test_the_card_says_where_conversations_stopped_and_repeats_add_the_counts(cells):
    """The card's notes name each conversation that did not complete, where and why; a cell's
    repeats fold into one row whose counts are the repeats' sums."""
    conv = cell(cells, "lc", "none", "conv")
    planned, sent = [4, 4, 3], [[OK, ERROR], [OK] * 4, [OK, INCOMPLETE]]
    figures = compute_metrics(talk_records(planned, sent), hit_time_cap=True, planned_turns=planned)
    metrics = done_metrics(conv, **figures)
    said = [n for n in cards.build.notes(conv, metrics) if n.startswith("Conversations")]
    assert said == [
        "Conversations not completed: 1 of 3 stopped at a failed turn (their later turns not "
        "sent), 1 cut by the time cap. Where each started one ended: session 0 (prompt 0) at "
        "turn 2: http_500; session 2 (prompt 2) at turn 2: time_cap."
    ]
    again = {**metrics, "cell": conv.id + "__r2"}
    combined = combine(conv.id, [metrics, again])
    assert combined["turns"] == {name: 2 * n for name, n in figures["turns"].items()}
    assert [s["cell"] for s in combined["conversations"]["stops"]] == [metrics["cell"]] * 2 + [
        again["cell"]
    ] * 2
    assert completed_text(summary_row(combined)) == (
        "12/22 turns, 2/6 conversations, 2 errors (4 turns after them not sent), 2 incomplete, "
        "hit the time cap (2 turns never ran)"
    )


def test_spec_gain_names_the_content_and_flags_random_tokens(cells):
    rates = {"chat": (10.0, 12.0), "code": (10.0, 16.0), "rand": (10.0, 9.0)}
    metrics = [m for w, (b, d) in rates.items() for m in drafter_pair(cells, w, b, d)]
    table = spec_gain_table(metrics).set_index("workload")
    for workload, (base, drafter) in rates.items():
        row = table.loc[workload]
        assert row["content"] == LABELS[workload]
        assert row["decode_gain_pct"] == pytest.approx(100 * (drafter - base) / base)
        assert (RANDOM_TOKENS_FLAG in row["flags"]) == (LABELS[workload] == RANDOM_TOKENS)


def test_gain_by_content_keeps_drafters_that_ran_on_two_contents_outside_sweeps(cells):
    metrics = [m for w in DRAFTED for m in drafter_pair(cells, w, 10.0, 11.0)]
    # the sweep's points (code) count for nothing: a drafter on chat and sweep points alone
    sweep = [done_metrics(cells[p], decode_tok_s=8.0) for p in points(cells)]
    # the same drafter on another engine, on chat only: one content, left out
    other = [
        {**m, "engine": "lc-off", "cell": m["cell"].replace("__lc__", "__lc-off__")}
        for m in drafter_pair(cells, "chat", 10.0, 11.0)
    ]
    spec_gain = spec_gain_table([*metrics, *sweep, *other])
    table = gain_by_content(spec_gain, set(points(cells)))
    assert list(table.columns) == GAIN_BY_CONTENT_COLUMNS
    assert list(table["content"]) == [LABELS[w] for w in DRAFTED]
    assert set(table["engine"]) == {"lc"} and set(table["drafter"]) == {"ngram"}
    expected = spec_gain[spec_gain["drafter_cell"].isin([m["cell"] for m in metrics[1::2]])]
    assert list(table["decode_gain_pct"]) == list(expected["decode_gain_pct"])
    # chat beside sweep points only: one content once the points are set aside
    chat_and_sweep = spec_gain_table([*drafter_pair(cells, "chat", 10.0, 11.0), *sweep])
    assert len(spec_gain_table(sweep)) > 0  # the points do have rows of their own
    assert gain_by_content(chat_and_sweep, set(points(cells))).empty
    assert len(gain_by_content(chat_and_sweep, set())) == len(chat_and_sweep)


# --- by_turn -----------------------------------------------------------------------------


def test_by_turn_has_a_row_per_turn_of_each_done_conversation_cell(cells):
    on, off = conversation(cells, "lc", [0.0, 60.0, 75.0]), conversation(cells, "lc-off", None)
    failed = {**conversation(cells, "lc", [1.0, 2.0, 3.0]), "status": Status.FAILED}
    chat = done_metrics(cell(cells, "lc", "none", "chat"))
    table = by_turn_table([chat, on, failed, off])
    assert list(table.columns) == BY_TURN_COLUMNS
    expected = [(m["cell"], t["turn"]) for m in (on, off) for t in m["by_turn"]]
    assert list(zip(table["cell"], table["turn"], strict=True)) == expected
    for (_, row), t in zip(table.iterrows(), on["by_turn"] + off["by_turn"], strict=True):
        assert row["requests"] == t["requests"]
        assert row["ttft_median_ms"] == t["ttft_ms"]["median"]
        assert row["ttft_p90_ms"] == t["ttft_ms"]["p90"]
        assert row["tpot_median_ms"] == t["tpot_ms"]["median"]
    assert list(table["prefix_cache"]) == ["on"] * 3 + ["off"] * 3
    hits = [t["prefix_cache_hit_pct"] for t in on["by_turn"]]
    assert list(table["prefix_cache_hit_pct"][:3]) == hits
    assert table["prefix_cache_hit_pct"][3:].isna().all()
    assert by_turn_table([chat, failed]).empty


# --- comparisons: the prefix-cache axis --------------------------------------------------


def _pair(**b_changes):
    a = {
        "model": "tiny",
        "workload": "conv",
        "drafter": "none",
        "engine": "lc",
        "quant": "q4_0",
        "engine_setup_sha256": "1" * 64,
        "prefix_cache": "on",
    }
    return a, {**a, "engine": "lc-off", "prefix_cache": "off", **b_changes}


@pytest.mark.parametrize(
    ("b_changes", "axis"),
    [
        ({}, PREFIX_CACHE),  # one setup, the cache on and off
        ({"prefix_cache": "on"}, ENGINE),  # one setup, the cache on in both
        ({"engine_setup_sha256": "2" * 64}, ENGINE),  # another setup
        ({"quant": "q8_0"}, ENGINE_QUANT),  # the quant too
        ({"engine": "lc", "quant": "q8_0"}, QUANT),  # one engine entry
    ],
)
def test_two_engines_that_differ_only_in_the_cache_pair_on_it(b_changes, axis):
    a, b = _pair(**b_changes)
    assert pair_axis(a, b) == axis and pair_axis(b, a) == axis
    assert cache_only(a, b) == (
        a["engine_setup_sha256"] == b["engine_setup_sha256"]
        and {a["prefix_cache"], b["prefix_cache"]} == {"on", "off"}
    )


def test_cells_without_a_setup_digest_pair_on_the_engine():
    """metrics.json from before the digest: no key, or null in both."""
    a, b = _pair()
    a_none, b_none = a | {"engine_setup_sha256": None}, b | {"engine_setup_sha256": None}
    a_gone = {k: v for k, v in a.items() if k != "engine_setup_sha256"}
    b_gone = {k: v for k, v in b.items() if k != "engine_setup_sha256"}
    for x, y in ((a_none, b_none), (a_gone, b_gone)):
        assert not cache_only(x, y) and pair_axis(x, y) == ENGINE


# --- the card ----------------------------------------------------------------------------


def test_the_card_reads_the_prefix_cache_hit_and_the_send_lag(cells):
    m = done_metrics(cell(cells, "lc", "none", "conv"), prefix_cache="on")
    hit = 41.25
    assert prefix_cache_value({**m, "prefix_cache_hit_pct": hit}) == f"{hit:.1f} % (cache on)"
    assert prefix_cache_value(m) == "not reported (cache on)"
    assert prefix_cache_value({"prefix_cache_hit_pct": hit}) == f"{hit:.1f} %"
    rows = {row[0]: row for row in measured_rows({**m, "prefix_cache": "off"}, {})}
    assert rows["Prefix-cache hit"][1] == "not reported (cache off)"
    assert "Send lag" not in rows
    lag = {"p50": 1.5, "p99": 12.25}
    rows = {row[0]: row for row in measured_rows({**m, "send_lag_ms": lag}, {})}
    assert rows["Send lag"][1] == f"{fmt(lag['p50'], 'ms')} (p99 {fmt(lag['p99'], 'ms')})"


def test_the_card_has_a_by_turn_section_for_a_conversation_cell(cells):
    m = conversation(cells, "lc", [0.0, 60.0, 75.0])
    section = by_turn_section(m)
    assert section.title == "Conversations by turn"
    for row, t in zip(section.rows, m["by_turn"], strict=True):
        assert row[:2] == (str(t["turn"]), str(t["requests"]))
        assert row[2].startswith(f"{t['ttft_ms']['median']:.1f} ms ({t['ttft_ms']['p90']:.1f} / ")
        assert row[3].startswith(f"{t['tpot_ms']['median']:.1f} ms (")
        assert row[4] == f"{t['prefix_cache_hit_pct']:.1f}"
    assert "prefix cache on" in section.paragraphs[0]
    no_hits = by_turn_section(conversation(cells, "lc-off", None))
    assert [row[4] for row in no_hits.rows] == ["—"] * 3
    assert by_turn_section(done_metrics(cell(cells, "lc", "none", "chat"))) is None

    def titles(metrics, of_cell):
        return [s.title for s in cards.build_card(of_cell, metrics).sections]

    conv_cell = cell(cells, "lc", "none", "conv")
    assert "Conversations by turn" in titles(m, conv_cell)
    chat = cell(cells, "lc", "none", "chat")
    assert "Conversations by turn" not in titles(done_metrics(chat), chat)
    text = cards.render_markdown(cards.build_card(conv_cell, m))
    assert "## Conversations by turn" in text and "| Prefix-cache hit |" in text


def test_a_drafter_on_random_tokens_carries_the_note_on_its_card(cells):
    base, drafter = drafter_pair(cells, "rand", 10.0, 11.0)
    notes = spec_section(drafter, {}).paragraphs
    sentence = RANDOM_TOKENS_FLAG[0].upper() + RANDOM_TOKENS_FLAG[1:] + "."
    assert sentence in notes
    _, on_chat = drafter_pair(cells, "chat", 10.0, 11.0)
    assert sentence not in spec_section(on_chat, {}).paragraphs
    titles = [
        s.title for s in cards.build_card(cell(cells, "lc", "ngram", "rand"), drafter).sections
    ]
    assert "Speculative decoding" in titles


# --- which answers the front page shows --------------------------------------------------


def test_the_content_answers_follow_the_matrix(cells):
    every = list(cells.values())
    assert labels.content_answers(every) == ["gain_by_content", "by_turn"]
    drafters = {w: cell(cells, "lc", "ngram", w) for w in DRAFTED}
    sweep_drafters = [c for c in every if c.sweep is not None and c.drafter == "ngram"]
    bases = [c for c in every if c.drafter == "none" and c.workload_name != "conv"]
    # one content among the drafter cells; the sweep's points (code) do not count
    assert labels.content_answers([drafters["chat"], *sweep_drafters, *bases]) == []
    assert labels.content_answers([drafters["chat"], drafters["code"]]) == ["gain_by_content"]
    conv = [c for c in every if c.workload_name == "conv"]
    assert labels.content_answers([drafters["chat"], *conv]) == ["by_turn"]


def _write(frame: pd.DataFrame, path) -> str:
    frame.to_csv(path, index=False)
    return str(path)


def test_the_front_page_shows_the_drafter_by_content_and_the_conversations(cells, tmp_path):
    metrics = [m for w in DRAFTED for m in drafter_pair(cells, w, 10.0, 11.0)]
    gain = gain_by_content(spec_gain_table(metrics), set())
    assert gain["decode_gain_lo_pct"].isna().all()  # no records: no interval, blank numbers
    turns = by_turn_table([conversation(cells, "lc", [0.0, 60.0, 75.0])])
    answers = [
        _write(turns, tmp_path / "by_turn.csv"),
        _write(gain, tmp_path / "gain_by_content.csv"),
    ]
    html = "\n".join(front_page.answers_html(answers))
    drafter_at, turns_at = (
        html.index("<h2>The drafter by content</h2>"),
        html.index("<h2>Conversations</h2>"),
    )
    assert drafter_at < turns_at  # FRONT_PAGE_ANSWERS' order, not the files'
    for label in (LABELS[w] for w in DRAFTED):
        assert f"<td>{label}</td>" in html
    assert "<th>prefix_cache_hit_pct</th>" in html and "<th>outputs</th>" not in html
    assert html.count("<tr>") == len(gain) + len(turns) + 2  # a header row per table


def _front_page(tmp_path, turns: pd.DataFrame, gain: pd.DataFrame) -> str:
    answers = [
        _write(turns, tmp_path / "by_turn.csv"),
        _write(gain, tmp_path / "gain_by_content.csv"),
    ]
    return "\n".join(front_page.answers_html(answers))


def test_the_front_page_leaves_out_a_gain_by_content_without_rows(cells, tmp_path):
    turns = by_turn_table([conversation(cells, "lc", [0.0, 60.0, 75.0])])
    html = _front_page(tmp_path, turns, pd.DataFrame(columns=GAIN_BY_CONTENT_COLUMNS))
    assert "<h2>Conversations</h2>" in html and "The drafter by content" not in html
    assert html.count("<th>ttft_median_ms</th>") == 1


# front_page.answer_rows reads `shown_when_filled` after pd.to_numeric(errors="coerce") made
# the blanks NaN, and NaN is truthy: `frame[c].astype(bool).any()` holds for an all-blank
# column (kept) and fails for an all-0.0 one (dropped).


def test_the_front_page_leaves_out_the_hit_column_where_no_turn_has_one(cells, tmp_path):
    turns = by_turn_table([conversation(cells, "lc-off", None)])
    assert turns["prefix_cache_hit_pct"].isna().all()
    html = _front_page(tmp_path, turns, pd.DataFrame(columns=GAIN_BY_CONTENT_COLUMNS))
    assert "<h2>Conversations</h2>" in html
    assert "<th>prefix_cache_hit_pct</th>" not in html


def test_the_front_page_keeps_a_hit_column_of_zeros(cells, tmp_path):
    """The cache off, the engine counting: 0 % at every turn is a measurement, not a blank."""
    turns = by_turn_table([conversation(cells, "lc-off", [0.0, 0.0, 0.0])])
    html = _front_page(tmp_path, turns, pd.DataFrame(columns=GAIN_BY_CONTENT_COLUMNS))
    assert "<th>prefix_cache_hit_pct</th>" in html
    assert html.count(f'<td class="num">{0.0:.2f}</td>') >= len(turns)


# --- the aggregate rule's tables ---------------------------------------------------------


def _out(tmp_path, names):
    return {f"{n}_{ext}": tmp_path / f"{n}.{ext}" for n in names for ext in ("csv", "md")}


def test_write_tables_writes_by_turn_and_gain_by_content_only_when_named(cells, tmp_path):
    config_cells = list(cells.values())
    metrics = [m for w in DRAFTED for m in drafter_pair(cells, w, 10.0, 11.0)]
    metrics += [done_metrics(cells[p], decode_tok_s=8.0) for p in points(cells)]
    on, off = conversation(cells, "lc", [0.0, 60.0, 75.0]), conversation(cells, "lc-off", None)
    metrics += [off, on]  # out of config order
    tables = ("summary", "index", "spec_gain")
    reference_only = tmp_path / "reference"
    reference_only.mkdir()
    writers.write_tables(metrics, config_cells, _out(reference_only, tables), None)
    assert sorted(p.name for p in reference_only.iterdir()) == sorted(
        p.name for p in _out(reference_only, tables).values()
    )
    out = _out(tmp_path, (*tables, "by_turn", "gain_by_content"))
    _, _, spec_gain = writers.write_tables(metrics, config_cells, out, None)
    by_turn = pd.read_csv(out["by_turn_csv"])
    assert list(by_turn["cell"]) == [on["cell"]] * 3 + [off["cell"]] * 3  # config order
    assert list(by_turn["ttft_median_ms"]) == pytest.approx(
        [t["ttft_ms"]["median"] for m in (on, off) for t in m["by_turn"]]
    )
    gain = pd.read_csv(out["gain_by_content_csv"], keep_default_na=False)
    assert list(gain["content"]) == [LABELS[w] for w in DRAFTED]
    assert set(points(cells)) & set(spec_gain["drafter_cell"])  # spec_gain keeps the points
    assert "# Conversations" in out["by_turn_md"].read_text()
    summary = pd.read_csv(out["summary_csv"], keep_default_na=False).set_index("cell")
    assert summary.loc[on["cell"], "content"] == "conversation"
    assert summary.loc[off["cell"], "prefix_cache"] == "off"


# --- the DAG -----------------------------------------------------------------------------


def test_the_defaults_front_page_reads_by_turn_and_gain_by_content(empty_workdir):
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    dag = build_dag(config)
    inputs = dag.front_page_inputs()
    for table in ("by_turn", "gain_by_content"):
        path = dag.path("aggregate", f"{table}_csv")
        assert path == f"results/summary/{table}.csv" and path in inputs
    # without the conversation workload's cells the by-turn table leaves the front page
    no_conversations = copy.deepcopy(config)
    no_conversations["cells"] = [
        entry
        for entry in config["cells"]
        if "chat" not in (entry.get("matrix") or {}).get("workload", [entry.get("workload")])
    ]
    assert len(no_conversations["cells"]) == len(config["cells"]) - 1
    inputs = build_dag(no_conversations).front_page_inputs()
    assert dag.path("aggregate", "by_turn_csv") not in inputs
    assert dag.path("aggregate", "gain_by_content_csv") in inputs
