"""KL divergence for real: the default's SmolLM2 chain (q4_1 -> bf16 -> f16 -> q8_0, q4_0) made
by the pipeline's own steps, then the fidelity steps (text, the f16's logits, each quant
against them) by Snakemake with the pinned build's llama-perplexity at one thread.

What must hold, and why:
- the f16 against its own logits reads KL 0 and the same top token at every scored position:
  the same weights, the same batches, the same build. The logits file keeps each log-probability
  in 16 bits, so "0" is within that rounding (KL mean below 1e-4; a q8_0 reads about 1e-3);
- q4_0 moves further from the f16 than q8_0 does, by more than the tool's own uncertainty;
- every record read the same text (one sha256) and the reference's logits are made once: a quant
  run again runs its own step, not the base step.

Uses the shared caches (build, weights): with them warm, the chain's steps are cache hits.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.support.engines import smollm2_chain_config
from tests.support.pipeline import rules_run, run_snakemake, write_config

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"
ENGINE = "llamacpp-cpu"
QUANTS = ("f16", "q8_0", "q4_0")


def fidelity_config() -> dict:
    return smollm2_chain_config(["q8_0", "q4_0"], ENGINE, reference_quant="f16")


def target(quant: str) -> str:
    return f"results/fidelity/{MODEL}__{quant}.json"


def test_f16_reads_kl_zero_against_itself_and_q4_0_further_than_q8_0(tmp_path):
    write_config(tmp_path, fidelity_config())
    started = time.monotonic()
    proc = run_snakemake(tmp_path, *map(target, QUANTS), timeout=3600)
    print(f"\nchain and fidelity steps: {time.monotonic() - started:.0f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = {q: json.loads((tmp_path / target(q)).read_text()) for q in QUANTS}
    for quant, record in records.items():
        assert record["status"] == "done", (quant, record.get("reason"))
        print(
            f"{quant}: KL mean {record['kld_mean']:.6f} ± {record['kld_mean_err']:.6f}, "
            f"p99 {record['kld_p99']:.6f}, same top {record['same_top_pct']:.2f} %, "
            f"PPL {record['perplexity']:.3f}, {record['wall_s']} s"
        )
    base = json.loads((tmp_path / f"results/fidelity/base/{MODEL}.json").read_text())
    print(f"base (f16 logits): {base['wall_s']} s, PPL {base['perplexity']}")
    f16, q8, q4 = (records[q] for q in QUANTS)
    assert f16["kld_mean"] < 1e-4 and f16["same_top_pct"] == 100.0
    assert f16["perplexity"] == pytest.approx(base["perplexity"], rel=1e-3)
    assert q8["kld_mean"] > f16["kld_mean"]
    assert q4["kld_mean"] - q4["kld_mean_err"] > q8["kld_mean"] + q8["kld_mean_err"]
    assert q4["same_top_pct"] < q8["same_top_pct"] <= 100.0
    assert len({r["text_sha256"] for r in [base, *records.values()]}) == 1
    assert {r["text_tokens"] for r in records.values()} == {base["text_tokens"]}

    (tmp_path / target("q8_0")).unlink()
    again = run_snakemake(tmp_path, target("q8_0"), timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert rules_run(again) == ["fidelity_kld"]
