"""Output fidelity through the REAL pipeline (Snakemake, the cells, their floor runs, the fidelity
table, spec_gain, the cards) against a STAND-IN server (`fixtures/sweeps/law_server.py`, launched
as a `native` llamacpp engine): no real server's greedy outputs, nor which of them a drafter
changes, nor how often two runs disagree, are known in advance. The stand-in's answers are a
known function of the prompt (`fixtures/sweeps/law.py`), so every figure is known exactly:

- `law-alter`: its drafter alters the answers to half the prompts (by hash) from token 3 on: the
  agreement is known, the first divergence at each altered prompt too; verdict `changed`;
- `law-noise`: no alteration, but the answers to a quarter of the prompts (by hash) vary from run
  to run: the floor is known, and the drafter, whose outputs vary only as much, is `unchanged`;
- the `few` workload: 3 prompts, too few for any verdict: `unresolved`;
- the `gone` workload: the reference's server exits at start (a negative step time, which the
  stand-in refuses): its floor run is not started, and the drafter's pair reads `no verdict:
  reference failed: ...` in fidelity.csv/md and on its card.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from tests.fixtures.sweeps.law import SERVER, Law
from tests.support.engines import left_behind
from tests.support.pipeline import run_snakemake, tiny_config, write_config

pytestmark = [pytest.mark.standin]

ALTER = Law(step_ms=1, step_per_stream_ms=0.5, alter_share=0.5, alter_after=3)
NOISE = Law(step_ms=1, step_per_stream_ms=0.5, alter_after=2, noise_share=0.25)
MAX_TOKENS = 8
PROMPTS = [f"question {i} for the fidelity table" for i in range(24)]
FEW = 3
GONE = 4
DRAFTER = "standin-draft"


def cell(engine: str, drafter: str, workload: str = "w") -> str:
    return f"smollm2-135m__{engine}__q4_1__{drafter}__{workload}"


def config(data: Path) -> dict:
    def workload(prompts: int) -> dict:
        return {
            "dataset": {"kind": "jsonl", "path": str(data)},
            "num_prompts": prompts,
            "concurrency": 2,
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
                    "engine": ["law-alter", "law-noise"],
                    "drafter": ["none", DRAFTER],
                    "workload": ["w"],
                },
                "fidelity_floor": True,
            },
            {
                "matrix": {
                    "model": ["smollm2-135m"],
                    "engine": ["law-alter"],
                    "drafter": ["none", DRAFTER],
                    "workload": ["few"],
                },
                "fidelity_floor": True,
            },
            {  # a reference whose server exits at start (the stand-in refuses a negative step)
                **{"model": "smollm2-135m", "engine": "law-alter", "workload": "gone"},
                "settings": {"law_step_ms": -1},
                "fidelity_floor": True,
            },
            {
                "model": "smollm2-135m",
                "engine": "law-alter",
                "workload": "gone",
                "drafter": DRAFTER,
            },
        ],
        workloads={"w": workload(len(PROMPTS)), "few": workload(FEW), "gone": workload(GONE)},
        drafters={DRAFTER: {"kind": "ngram-simple", "n_max": 3}},
    )
    out["engines"] = {"law-alter": ALTER.engine(), "law-noise": NOISE.engine()}
    out["checks"] = {"other_cpu_percent_of_core": 400}
    return out


@pytest.fixture(scope="module")
def fidelity_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("fidelity-standin")
    data = workdir / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    write_config(workdir, config(data))
    proc = run_snakemake(workdir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(workdir / "results/summary/fidelity.csv") as handle:
        rows = {row["cell"]: row for row in csv.DictReader(handle)}
    yield workdir, rows, proc
    assert left_behind(str(SERVER)) == []


def test_a_drafter_that_alters_outputs_is_changed_with_the_known_agreement(fidelity_run):
    _, rows, _ = fidelity_run
    row = rows[cell("law-alter", DRAFTER)]
    identical = ALTER.expected_identical(PROMPTS, MAX_TOKENS)
    assert 0 < identical < len(PROMPTS) - 6  # the hash alters enough prompts to tell
    assert (row["kind"], row["reference_cell"]) == ("drafter", cell("law-alter", "none"))
    assert int(row["prompts_compared"]) == len(PROMPTS)
    known = 100 * identical / len(PROMPTS)
    assert float(row["identical_pct"]) == pytest.approx(known)
    assert float(row["identical_lo_pct"]) <= known <= float(row["identical_hi_pct"])
    assert float(row["floor_identical_pct"]) == 100.0  # no noise: two runs agree on every prompt
    positions = [ALTER.first_divergence(p, MAX_TOKENS) for p in PROMPTS]
    known_median = statistics.median(p for p in positions if p is not None)
    assert float(row["first_divergence_median"]) == pytest.approx(known_median)
    assert row["verdict"] == "changed"


def test_noise_alone_is_the_floor_and_reads_unchanged(fidelity_run):
    _, rows, _ = fidelity_run
    base = cell("law-noise", "none")
    floor = rows[f"{base}__floor"]
    known_floor = NOISE.expected_identical(PROMPTS, MAX_TOKENS, (False, False))
    assert 0 < known_floor < len(PROMPTS)
    assert (floor["kind"], floor["reference_cell"]) == ("floor", base)
    assert float(floor["identical_pct"]) == pytest.approx(100 * known_floor / len(PROMPTS))
    row = rows[cell("law-noise", DRAFTER)]
    assert float(row["identical_pct"]) == pytest.approx(100 * known_floor / len(PROMPTS))
    assert float(row["floor_identical_pct"]) == float(floor["identical_pct"])
    assert row["verdict"] == "unchanged"


def test_too_few_prompts_are_unresolved(fidelity_run):
    _, rows, _ = fidelity_run
    row = rows[cell("law-alter", DRAFTER, "few")]
    assert int(row["prompts_compared"]) == FEW
    assert row["verdict"] == "unresolved" and "too few prompts" in row["verdict_reason"]


def test_the_changed_drafter_is_flagged_where_its_gain_is_shown(fidelity_run):
    workdir, _, proc = fidelity_run
    with open(workdir / "results/summary/spec_gain.csv") as handle:
        gains = {row["drafter_cell"]: row for row in csv.DictReader(handle)}
    changed, unchanged = gains[cell("law-alter", DRAFTER)], gains[cell("law-noise", DRAFTER)]
    assert changed["outputs"] == "changed" and "outputs changed" in changed["flags"]
    assert unchanged["outputs"] == "unchanged" and "outputs changed" not in unchanged["flags"]
    card = (workdir / "results/cells" / cell("law-alter", DRAFTER) / "card.md").read_text()
    assert "## Fidelity" in card and "speed-up is not a free one" in card
    # the floor runs are cells of their own, in no table but this one
    with open(workdir / "results/summary/summary.csv") as handle:
        assert not any(r["cell"].endswith("__floor") for r in csv.DictReader(handle))
    # the run's last lines show the verdict beside each compared cell
    end = (proc.stdout + proc.stderr).split("\ncell ")[-1]
    assert "outputs" in end.splitlines()[0] and "changed" in end


def test_a_failed_reference_gives_no_verdict_and_its_floor_run_is_not_started(fidelity_run):
    """Before, fidelity.csv left the pair out while the card judged the reference's partial
    records, and the floor run started a server of its own."""
    workdir, rows, _ = fidelity_run
    reference, drafter = cell("law-alter", "none", "gone"), cell("law-alter", DRAFTER, "gone")
    cells = workdir / "results/cells"
    failed = json.loads((cells / reference / "metrics.json").read_text())
    assert failed["status"] == "failed"
    floor = json.loads((cells / f"{reference}__floor" / "metrics.json").read_text())
    assert floor["status"] == "failed", floor
    assert f"reference {reference} failed: " in floor["reason"]
    assert floor["reason"].endswith("; its floor run is not started"), floor["reason"]
    assert (
        (cells / f"{reference}__floor" / "server.log")
        .read_text()
        .startswith("(the server was never started)")
    )
    row = rows[drafter]
    assert row["verdict"] == "no verdict" and row["prompts_compared"] == ""
    assert row["verdict_reason"].startswith("reference failed: "), row["verdict_reason"]
    md = (workdir / "results/summary/fidelity.md").read_text()
    assert "no verdict: reference failed: " in md
    card = (cells / drafter / "card.md").read_text()
    assert "| Verdict | no verdict | reference failed: " in card, card
