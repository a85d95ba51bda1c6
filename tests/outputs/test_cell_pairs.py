"""Engine against engine and quant against quant (results/summary/comparisons.*): which cells
pair, the interval and verdict on simulated runs with a planted difference or none, and the new
outputs in the real DAG. Pairs are made from the fixture results by giving a finished cell
another engine or quant; simulated runs come from tests/outputs/test_stats.py."""

from __future__ import annotations

import base64
import copy
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.outputs.test_stats import simulate_run
from tests.support.outputs import (
    BASE,
    BASE_C4,
    DRAFTER,
    FAILED,
    FIXTURES,
    fixture_metrics,
    results_tree,
)
from tests.support.pipeline import run_snakemake
from workflow_scripts.config.cell_ids import repeat_id
from workflow_scripts.loadgen.metrics import compute_metrics
from workflow_scripts.outputs import cell_pairs, writers
from workflow_scripts.outputs import changes as change_stats
from workflow_scripts.outputs.repeats import collapse_repeats

OUTPUTS = ("comparisons.csv", "comparisons.md", "comparisons.html")


def variant(metrics: dict, engine: str | None = None, quant: str | None = None) -> dict:
    """A finished cell as if run on another engine and/or quant (its id follows)."""
    out = copy.deepcopy(metrics)
    model, old_engine, old_quant, drafter, workload = metrics["cell"].split("__")
    out["engine"], out["quant"] = engine or old_engine, quant or old_quant
    out["cell"] = "__".join([model, out["engine"], out["quant"], drafter, workload])
    return out


@pytest.fixture
def records():
    return writers.load_records(sorted((FIXTURES / "cells").glob("*/requests.jsonl")))


def test_cells_pair_when_only_engine_or_quant_differs(tmp_path):
    metrics = fixture_metrics(tmp_path)
    base, drafter, base_c4 = metrics[BASE], metrics[DRAFTER], metrics[BASE_C4]
    q8 = variant(base, quant="q8_0")  # quant axis
    vllm_q4 = variant(base, engine="vllm-cpu")  # engine axis, same quant name
    vllm_bf16 = variant(base, engine="vllm-cpu", quant="bf16")  # both changed
    vllm_ngram = variant(drafter, engine="vllm-cpu", quant="bf16")  # drafter cells pair too
    c4_q8 = variant(base_c4, quant="q8_0")
    failed_q8 = variant(base, quant="q5_0") | {"status": "failed"}
    ordered = [base, drafter, base_c4, metrics[FAILED], q8, vllm_q4, vllm_bf16, vllm_ngram]
    ordered += [c4_q8, failed_q8]
    pairs = {(p.a["cell"], p.b["cell"]): p.axis for p in cell_pairs.comparison_pairs(ordered)}
    assert pairs == {
        (BASE, q8["cell"]): "quant",
        (BASE, vllm_q4["cell"]): "engine",
        (BASE, vllm_bf16["cell"]): "engine+quant",
        (q8["cell"], vllm_q4["cell"]): "engine+quant",
        (q8["cell"], vllm_bf16["cell"]): "engine+quant",
        (vllm_q4["cell"], vllm_bf16["cell"]): "quant",
        (DRAFTER, vllm_ngram["cell"]): "engine+quant",
        (BASE_C4, c4_q8["cell"]): "quant",
    }  # never across workloads or drafters, never a cell that did not finish; A comes first
    # another repeat structure is no comparison
    repeated = q8 | {"repeats": {"runs": 3, "done": 3, "figures": []}}
    assert cell_pairs.pair_axis(base, repeated) is None
    assert cell_pairs.pair_axis(base, copy.deepcopy(base)) is None  # nothing differs


def test_table_on_fixture_records_pairs_over_the_prompts(tmp_path, records):
    metrics = fixture_metrics(tmp_path)
    # B: the drafter cell's records as another quant of the base (its runs are faster)
    other = variant(metrics[DRAFTER], quant="q8_0") | {"drafter": "none", "spec": None}
    other["cell"] = other["cell"].replace("__ngram__", "__none__")
    records[other["cell"]] = records[DRAFTER]
    table = cell_pairs.comparisons_table([metrics[BASE], other], records)
    assert list(table.columns) == cell_pairs.COLUMNS
    assert list(table["figure"]) == list(cell_pairs.FIGURES)  # one row per figure
    decode = table.set_index("figure").loc["decode_tok_s"]
    assert (decode["axis"], decode["a_cell"], decode["b_cell"]) == ("quant", BASE, other["cell"])
    assert decode["a_value"] == pytest.approx(metrics[BASE]["decode_tok_s"])
    assert decode["b_value"] == pytest.approx(metrics[DRAFTER]["decode_tok_s"])
    assert decode["change_pct"] == pytest.approx(
        100 * (metrics[DRAFTER]["decode_tok_s"] / metrics[BASE]["decode_tok_s"] - 1)
    )  # every prompt completed by both: the change is the headline figures'
    assert decode["change_lo_pct"] <= decode["change_pct"] <= decode["change_hi_pct"]
    assert decode["interval_method"] == change_stats.PAIRED_PROMPTS
    assert decode["interval_basis"] == "6 prompts"
    assert decode["verdict"] in (
        change_stats.FASTER,
        change_stats.SLOWER,
        change_stats.NO_DIFFERENCE,
    )
    # without records nothing is paired: the change alone, no interval, no verdict
    bare = cell_pairs.comparisons_table([metrics[BASE], other]).set_index("figure")
    assert bare.loc["decode_tok_s", "change_pct"] == pytest.approx(decode["change_pct"])
    assert bare.loc["decode_tok_s", "interval_method"] == change_stats.NO_INTERVAL
    assert pd.isna(bare.loc["decode_tok_s", "verdict"])


def simulated_pair(rng, tpot_scale: float, n: int = 100, **b_changes):
    """A and B: two simulated runs of the same 100 prompts (same answers), B's time per output
    token scaled by `tpot_scale`; metrics from the records, as the cell rule computes them."""
    tokens = rng.integers(20, 200, size=n)
    runs = {
        "m__llamacpp__q8_0__none__w": simulate_run(rng, n, completion=tokens, noise=0.1),
        "m__llamacpp__q4_0__none__w": simulate_run(
            rng, n, completion=tokens, noise=0.1, tpot_scale=tpot_scale
        ),
    }
    metrics = []
    for cell, records in runs.items():
        model, engine, quant, drafter, workload = cell.split("__")
        identity = {"model": model, "engine": engine, "quant": quant, "drafter": drafter}
        metrics.append(
            {"cell": cell, "workload": workload, "status": "done", **identity}
            | compute_metrics(records)
        )
    metrics[1].update(b_changes)
    return metrics, runs


def verdicts(trials: int, tpot_scale: float, seed: int) -> dict[str, list[str]]:
    rng = np.random.default_rng(seed)
    out: dict[str, list[str]] = {figure: [] for figure in cell_pairs.FIGURES}
    for _ in range(trials):
        table = cell_pairs.comparisons_table(*simulated_pair(rng, tpot_scale))
        for row in table.to_dict("records"):
            out[row["figure"]].append(row["verdict"])
    return out


def test_a_planted_ten_percent_difference_reads_faster_or_slower():
    faster = verdicts(40, tpot_scale=1 / 1.1, seed=41)  # B decodes 10 % faster
    slower = verdicts(40, tpot_scale=1.1, seed=42)
    for figure in ("decode_tok_s", "tpot_median_ms"):  # lower TPOT is faster too
        assert faster[figure].count(change_stats.FASTER) >= 0.9 * 40, (figure, faster[figure])
        assert slower[figure].count(change_stats.SLOWER) >= 0.9 * 40, (figure, slower[figure])
    # TTFT was left alone: no difference there
    assert faster["ttft_median_ms"].count(change_stats.NO_DIFFERENCE) >= 0.85 * 40


def test_two_runs_of_one_distribution_mostly_read_no_detectable_difference():
    same = verdicts(60, tpot_scale=1.0, seed=43)
    for figure, found in same.items():
        assert found.count(change_stats.NO_DIFFERENCE) >= 0.85 * 60, (figure, found)


def test_prompts_of_another_dataset_are_compared_unpaired_and_flagged():
    rng = np.random.default_rng(44)
    metrics, records = simulated_pair(rng, 1 / 1.5, dataset_sha256="b" * 64)
    metrics[0]["dataset_sha256"] = "a" * 64
    row = cell_pairs.comparisons_table(metrics, records).iloc[0]
    assert row["interval_method"] == change_stats.UNPAIRED
    assert row["interval_basis"] == "100 + 100 requests"
    assert "prompts not paired" in row["flags"]
    assert row["verdict"] == change_stats.FASTER  # 50 % faster shows even without pairing


def test_differently_tokenized_prompts_and_missing_prompts_are_flagged():
    rng = np.random.default_rng(45)
    metrics, records = simulated_pair(rng, 1.0)
    b = list(records)[1]
    records[b][0].prompt_tokens += 3  # the other server's template adds tokens
    records[b][1].status = "error"
    flags = cell_pairs.comparisons_table(metrics, records).iloc[0]["flags"]
    assert "different prompts completed (100 and 99): change on the 99 both completed" in flags
    assert "prompt tokens differ on 1 of 99 prompts" in flags


def test_cells_repeated_three_times_compare_their_repeats(tmp_path):
    metrics = fixture_metrics(tmp_path)
    runs = []
    for cell, values in (
        (metrics[BASE], (30.0, 30.5, 29.5)),
        (variant(metrics[BASE], quant="q8_0"), (36.0, 36.6, 35.4)),
    ):
        for k, value in enumerate(values, start=1):
            runs.append(cell | {"cell": repeat_id(cell["cell"], k), "decode_tok_s": value})
    folded, _, _ = collapse_repeats(runs)
    row = cell_pairs.comparisons_table(folded).set_index("figure").loc["decode_tok_s"]
    assert row["a_value"] == pytest.approx(30.0) and row["b_value"] == pytest.approx(36.0)
    assert row["change_pct"] == pytest.approx(20.0)
    assert (row["interval_method"], row["interval_basis"]) == (change_stats.REPEATS_T, "3 + 3 runs")
    assert row["verdict"] == change_stats.FASTER


def test_markdown_and_html_show_the_compact_view(tmp_path, records):
    metrics = fixture_metrics(tmp_path)
    other = variant(metrics[BASE], engine="vllm-cpu", quant="bf16")
    records[other["cell"]] = records[BASE]
    table = cell_pairs.comparisons_table([metrics[BASE], other], records)
    out = {f"comparisons_{ext}": tmp_path / f"comparisons.{ext}" for ext in ("csv", "md", "html")}
    cell_pairs.write_comparisons(table, out)
    assert pd.read_csv(out["comparisons_csv"]).shape == (3, len(cell_pairs.COLUMNS))
    text = out["comparisons_md"].read_text()
    line = next(x for x in text.splitlines() if "| decode tok/s " in x)
    assert "| engine+quant " in line and "| llamacpp-local · q4_0 | vllm-cpu · bf16 |" in line
    assert "[+0.0, +0.0]" in line and "paired over prompts, 6 prompts" in line
    assert "no detectable difference" in line
    assert "two things changed at once" in text.split("| axis")[0]
    assert "vllm-cpu · bf16" in out["comparisons_html"].read_text()


# --- the DAG: a dry run lists the new outputs; a run puts the table in the report ----------


def add_quant_cell(workdir) -> str:
    """The fixture tree plus a finished q8_0 cell of the base (the n-gram cell's records, so
    the pair differs): the config gets the quant and the cell, the tree its results."""
    config_path = workdir / "matrix.yaml"
    config = yaml.safe_load(config_path.read_text())
    quants = config["models"]["tiny-llama"]["quants"]
    quants["q8_0"] = {"weights": {"source": "local", "path": "weights/tiny-llama-q8_0.gguf"}}
    config["cells"].insert(
        1, {"model": "tiny-llama", "quant": "q8_0", "engine": "llamacpp-local", "workload": "c2"}
    )
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    results = workdir / "results"
    cell = BASE.replace("__q4_0__", "__q8_0__")
    shutil.copytree(results / "cells" / DRAFTER, results / "cells" / cell)
    shutil.copy2(
        results / "weights" / "tiny-llama__q4_0.json", results / "weights" / "tiny-llama__q8_0.json"
    )
    metrics_path = results / "cells" / cell / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    metrics.update(cell=cell, quant="q8_0", drafter="none", spec=None)
    metrics_path.write_text(json.dumps(metrics))
    shutil.copystat(results / "cells" / DRAFTER / "metrics.json", metrics_path)
    return cell


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("comparisons")
    results_tree(workdir)
    return workdir, add_quant_cell(workdir)


def test_dry_run_plans_the_comparisons_outputs(workdir):
    folder, _ = workdir
    proc = run_snakemake(folder, "-n", timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    job = out[out.index("rule comparisons:") :].split("\n\n")[0]
    outputs = next(line for line in job.splitlines() if line.strip().startswith("output:"))
    assert [f"results/summary/{name}" in outputs for name in OUTPUTS] == [True] * 3


def test_the_report_holds_the_comparisons_table(workdir):
    folder, cell = workdir
    proc = run_snakemake(folder, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = folder / "results" / "summary"
    table = pd.read_csv(summary / "comparisons.csv")
    pairs = table[["a_cell", "b_cell", "axis"]].drop_duplicates().values.tolist()
    assert pairs == [[BASE, cell, "quant"]]
    html = (folder / "results" / "report.html").read_text()
    assert '"Comparisons"' in html or "'Comparisons'" in html  # its own category
    embedded = re.search(r"comparisons\.html;base64,([A-Za-z0-9+/=]+)", html)
    assert embedded, "comparisons.html is not embedded in the report"
    page = base64.b64decode(embedded.group(1)).decode()
    assert "llamacpp-local · q4_0" in page and "llamacpp-local · q8_0" in page
    assert "paired over prompts, 6 prompts" in page
