"""The fidelity table, the frontier and the drafter flags from hand-made records whose agreement
is known by construction (no server: the outputs are written here)."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.support.config import default_config
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.fidelity.pairs import FidelitySettings, floor_id
from workflow_scripts.outputs.fidelity.compared import drafter_output_verdicts
from workflow_scripts.outputs.fidelity.frontier import frontier_points, frontier_table
from workflow_scripts.outputs.fidelity.table import fidelity_table
from workflow_scripts.outputs.front_page import answers_html

SMOL = "smollm2-135m__llamacpp-cpu"
F16, Q8, Q4 = (f"{SMOL}__{q}__none__c4" for q in ("f16", "q8_0", "q4_0"))
NGRAM = f"{SMOL}__q4_0__ngram__c4"
N = 16


def records(differ: set[int], at: int = 3, recorded: bool = True) -> list[dict]:
    """N measured answers `answer number i ...`, those in `differ` changed from character `at`."""
    out = [{"prompt_index": 0, "status": "ok", "warmup": True, "output": "warm"}]
    for i in range(N):
        text = f"answer number {i} and more"
        if i in differ:
            text = text[:at] + "#" + text[at + 1 :]
        out.append({"prompt_index": i, "status": "ok", "warmup": False, "output": text})
    if not recorded:
        for r in out:
            r["output"] = None
    return out


@pytest.fixture
def matrix():
    config = validate_config(default_config())
    return config, build_cells(config)


def test_rows_verdicts_kl_goal_and_frontier(matrix):
    config, cells = matrix
    recs = {
        F16: records(set()),
        floor_id(F16): records(set()),
        Q8: records({0, 1}),  # 14/16 against a 16/16 floor: not detectably below
        Q4: records(set(range(8)), at=5),  # 8/16: changed, first divergence at 5
        floor_id(Q4): records(set(range(8)), at=5),
        NGRAM: records(set(range(14)), at=5),  # 6 of 16 differ from Q4's (8 to 13)
    }
    metrics = [
        {"cell": cell, "status": "done", "decode_tok_s": speed}
        for cell, speed in ((F16, 50.0), (Q8, 70.0), (Q4, 100.0), (NGRAM, 90.0))
    ] + [{"cell": floor_id(c), "status": "done", "decode_tok_s": 1.0} for c in (F16, Q4)]
    kld = {
        "smollm2-135m__q8_0": {"kld_mean": 0.01, "kld_mean_err": 0.001, "same_top_pct": 97.0},
        "smollm2-135m__q4_0": {"kld_mean": 0.2, "kld_mean_err": 0.01, "same_top_pct": 80.0},
    }
    settings = FidelitySettings.of_config(config)
    table = fidelity_table(cells, metrics, recs, kld, settings).set_index("cell")

    q8, q4, ngram = table.loc[Q8], table.loc[Q4], table.loc[NGRAM]
    assert (q8["kind"], q8["reference_cell"], q8["prompts_compared"]) == ("quant", F16, N)
    assert q8["identical_pct"] == pytest.approx(87.5) and q8["floor_identical_pct"] == 100.0
    assert q8["identical_lo_pct"] < 87.5 < q8["identical_hi_pct"]
    assert q8["verdict"] == "unchanged" and q8["goal_verdict"] == "pass"
    assert q4["verdict"] == "changed" and q4["first_divergence_median"] == 5
    assert q4["kld_mean"] == 0.2 and q4["goal_verdict"] == "fail"
    # the drafter against its base: 10 of 16 identical, Fisher p = C(16,10)/C(32,26) < 0.05
    assert ngram["kind"] == "drafter" and ngram["identical_pct"] == pytest.approx(62.5)
    assert ngram["verdict"] == "changed" and pd_isna(ngram["kld_mean"])
    assert table.loc[floor_id(F16), "kind"] == "floor"
    # vLLM and the sweep have no records here: no row, nothing invented
    assert not any("vllm" in c or "sweep" in c for c in table.index)
    assert drafter_output_verdicts(cells, recs, metrics) == {NGRAM: "changed"}

    points = frontier_points(
        table.reset_index(), {m["cell"]: m for m in metrics}, {c.id: c for c in cells}
    )
    assert [(p["quant"], p["loss"], p["frontier"]) for p in points] == [
        ("f16", 0.0, True),
        ("q8_0", 0.01, True),
        ("q4_0", 0.2, True),
    ]
    frontier = frontier_table(points)
    assert frontier.loc[frontier["answer"] != "", "quant"].tolist() == ["q8_0"]


def test_outputs_not_recorded_say_so_and_judge_nothing(matrix):
    config, cells = matrix
    recs = {F16: records(set()), Q8: records(set(), recorded=False)}
    metrics = [{"cell": c, "status": "done", "decode_tok_s": 1.0} for c in recs]
    table = fidelity_table(cells, metrics, recs, {}, FidelitySettings.of_config(config))
    (row,) = table.to_dict("records")
    assert row["verdict"] == "not recorded" and pd_isna(row["identical_pct"])


@pytest.mark.parametrize(
    ("kld", "why"),
    [
        (  # written `done` before a non-finite figure failed the step
            {"status": "done", "kld_mean": float("nan"), "kld_p99": 0.1, "same_top_pct": 97.0},
            "kld_mean is nan: no finite figure",
        ),
        (
            {"status": "failed", "reason": "PerplexityError: llama-perplexity printed kld_mean"},
            "failed: PerplexityError: llama-perplexity printed kld_mean (retried next run)",
        ),
    ],
    ids=["nan", "failed"],
)
def test_a_kl_record_without_a_finite_figure_never_passes_a_kl_goal(matrix, kld, why):
    """A quant identical to its reference on every prompt meets the agreement objective; its
    KL objective has no figure to meet: unresolved, saying why, so the goal is not `pass`.
    Before, the missing figure read as "not measured" and the goal passed."""
    config, cells = matrix
    recs = {F16: records(set()), floor_id(F16): records(set()), Q8: records(set())}
    metrics = [{"cell": c, "status": "done", "decode_tok_s": 1.0} for c in recs]
    goal = {"kld_mean": {"max": 0.05}, "agreement_of_floor_pct": {"min": 80}}
    settings = FidelitySettings({"smollm2-135m": "f16"}, {"smollm2-135m": goal})
    table = fidelity_table(cells, metrics, recs, {"smollm2-135m__q8_0": kld}, settings)
    row = table.set_index("cell").loc[Q8]
    assert row["verdict"] == "unchanged" and row["kld_note"] == why
    assert pd_isna(row["kld_mean"])
    assert row["goal_verdict"] == "unresolved"
    assert f"KL mean: unresolved ({why})" in row["goal_detail"]
    assert "agreement % of floor 100 [80.6, 100] ≥ 80: pass" in row["goal_detail"]


def pd_isna(value) -> bool:
    return value is None or value != value


def test_the_front_page_answers_with_the_frontier_and_leaves_out_an_empty_one(tmp_path):
    """The fastest quant within the goal, with its figure; no section at all where no quant was
    compared (a matrix that compares only drafters)."""
    columns = ["model", "cell", "engine", "workload", "quant", "decode_tok_s", "measure"]
    rows = [
        ["m", "c1", "e", "w", "f16", 50.0, "kld_mean", 0.0, "pass", ""],
        ["m", "c2", "e", "w", "q8_0", 60.0, "kld_mean", 0.003, "pass", "fastest within the goal"],
    ]
    frontier = pd.DataFrame(rows, columns=[*columns, "loss", "goal_verdict", "answer"])
    (tmp_path / "fidelity_frontier.csv").write_text(frontier.to_csv(index=False))
    (tmp_path / "fidelity.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    shown = answers_html([str(tmp_path / "fidelity_frontier.csv"), str(tmp_path / "fidelity.png")])
    html = "\n".join(shown)
    assert "<h2>Output fidelity</h2>" in html and "fastest within the goal" in html
    assert html.count("data:image/png;base64,") == 1
    frontier.iloc[:0].to_csv(tmp_path / "fidelity_frontier.csv", index=False)
    assert (
        answers_html([str(tmp_path / "fidelity_frontier.csv"), str(tmp_path / "fidelity.png")])
        == []
    )


def test_the_frontier_keeps_ties_and_drops_a_quant_another_beats_on_both():
    """Decode tok/s against KL mean, a hand-made table: q8_0 and q6_k tie (both on it), q5_k
    has their loss and is slower (off), q4_0 is faster with more loss (on), q3_k is slower and
    lossier than q4_0 (off); the reference, loss 0, is on. What the sweeps' Pareto frontier
    gives with the loss negated, as the dominance test it replaced gave."""
    speeds = {"q8_0": 20.0, "q6_k": 20.0, "q5_k": 15.0, "q4_0": 30.0, "q3_k": 25.0}
    losses = {"q8_0": 0.01, "q6_k": 0.01, "q5_k": 0.01, "q4_0": 0.05, "q3_k": 0.06}
    rows = [
        {
            "kind": "quant",
            "model": "m",
            "engine": "e",
            "workload": "w",
            "reference_cell": "m__f16",
            "cell": f"m__{quant}",
            "quant": quant,
            "decode_tok_s": speed,
            "kld_mean": losses[quant],
            "identical_pct": None,
            "goal_verdict": None,
        }
        for quant, speed in speeds.items()
    ]
    metrics = {"m__f16": {"decode_tok_s": 10.0}}
    reference = build_cells(validate_config(default_config()))[0]
    points = frontier_points(pd.DataFrame(rows), metrics, {"m__f16": reference})
    on = {p["cell"] for p in points if p["frontier"]}
    assert on == {"m__f16", "m__q8_0", "m__q6_k", "m__q4_0"}
    assert [p["loss"] for p in points] == [0.0, 0.01, 0.01, 0.01, 0.05, 0.06]
