"""The speculative-decoding gain table: each drafter cell beside its base cell (same model, engine,
quant and workload, drafter `none`), with the gain in %, on all prompts and on the prompts both
completed, and its interval. A pure function of the metrics and records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ..fidelity.agreement import CHANGED
from ..loadgen.metrics import compute_metrics
from ..loadgen.records import OK, RequestRecord, pair_requests
from ..process.machine_use import disturbed_flag
from ..verdicts.families import VerdictKeys, judge_series
from ..vocabulary import IDENTITY_COLUMNS, RANDOM_TOKENS, CellMetrics, Status, identity_columns
from .changes import FASTER, NO_DIFFERENCE, SLOWER, paired_changes, repeat_changes
from .compact import (
    is_missing,
    median_of,
)
from .energy.change import ENERGY_CHANGE_COLUMNS, ENERGY_KEYS, energy_change
from .stats import MIN_REPEATS


def _gain_pct(new: float | None, base: float | None) -> float | None:
    if is_missing(new) or is_missing(base) or base == 0:
        return None
    return 100.0 * (new - base) / base


SPEC_GAIN_COLUMNS = [
    "drafter_cell",
    "base_cell",
    *IDENTITY_COLUMNS,
    "base_decode_tok_s",
    "drafter_decode_tok_s",
    "decode_gain_pct",
    "base_ttft_median_ms",
    "drafter_ttft_median_ms",
    "base_tpot_median_ms",
    "drafter_tpot_median_ms",
    "acceptance_rate",
    "acceptance_length",
    "drafter_itl_per_token_median_ms",
    "common_prompts",
    "base_decode_tok_s_common",
    "drafter_decode_tok_s_common",
    "decode_gain_pct_common",
    "base_tpot_median_ms_common",
    "drafter_tpot_median_ms_common",
    "flags",
    # appended: the gain's 95 % interval, paired over the prompts both cells completed
    "decode_gain_lo_pct",
    "decode_gain_hi_pct",
    "verdict",
    "gain_interval_source",
    "tpot_change_pct",
    "tpot_change_lo_pct",
    "tpot_change_hi_pct",
    # appended: the pair rests on a measurement other work disturbed (flags says which cell)
    "disturbed",
    # appended: the drafter's greedy outputs against its base's (outputs.fidelity.compared):
    # `changed` means its speed-up is not a free one
    "outputs",
    # appended: what the prompts are (chat, conversation, code, random tokens): a drafter's
    # acceptance, and so its gain, depends on the text it drafts
    "content",
    # appended: the gain's test and its family: a sweep point's `verdict` is Holm's over its
    # series' points (GAIN_KEYS), `verdict_unadjusted` the point's own
    "p_value",
    "p_adjusted",
    "verdict_unadjusted",
    "family",
    # appended: the drafter's energy change per output token, its interval, test, verdict and
    # family (outputs.energy.change)
    *ENERGY_CHANGE_COLUMNS,
]
OUTPUTS_CHANGED_FLAG = (
    "outputs changed: the drafter's greedy outputs differ from its base's beyond the noise "
    "floor (fidelity.md)"
)


RANDOM_TOKENS_FLAG = (
    "random tokens: a drafter's gain on random prompts is not its gain on text (it drafts "
    "from what the prompt is)"
)


def content_flag(metrics: CellMetrics) -> str | None:
    """The label a drafter's gain carries wherever it is shown when its prompts were random
    tokens."""
    return RANDOM_TOKENS_FLAG if metrics.get("content") == RANDOM_TOKENS else None


def completed_prompts(records: Sequence[RequestRecord]) -> set[tuple[int, int]]:
    """The pair keys (prompt, conversation turn) of the completed measured requests."""
    return {r.pair_key for r in records if r.status == OK and not r.warmup}


def common_subset_figures(
    base_records: Sequence[RequestRecord], drafter_records: Sequence[RequestRecord]
) -> dict[str, Any]:
    """When the two cells completed different prompts (a cap, skipped or failed requests) or
    sent some as other texts (a conversation's history of the model's own answers), the pair's
    figures again on the prompts they pair (records.pair_requests), from the raw records.
    Throughput there is the subset's tokens over the subset's own span, so it compares like
    with like but is not the cell's headline figure."""
    pairing = pair_requests(base_records, drafter_records)
    common = pairing.keys
    if not pairing.unpaired and completed_prompts(base_records) == completed_prompts(
        drafter_records
    ):
        return {}

    def on_common(records: Sequence[RequestRecord]) -> dict[str, Any]:
        return compute_metrics([r for r in records if r.pair_key in common and not r.warmup])

    base, drafter = on_common(base_records), on_common(drafter_records)
    return {
        "common_prompts": len(common),
        "base_decode_tok_s_common": base["decode_tok_s"],
        "drafter_decode_tok_s_common": drafter["decode_tok_s"],
        "decode_gain_pct_common": _gain_pct(drafter["decode_tok_s"], base["decode_tok_s"]),
        "base_tpot_median_ms_common": base["tpot_ms"]["median"],
        "drafter_tpot_median_ms_common": drafter["tpot_ms"]["median"],
    }


def paired_gain_columns(
    base_records: Sequence[RequestRecord], drafter_records: Sequence[RequestRecord]
) -> dict[str, Any]:
    """The drafter's decode gain and TPOT change with 95 % intervals from a paired randomization
    test over the prompts both cells completed as the same text, and the verdict on decode
    tok/s; the source says how many were not paired."""
    changes = paired_changes(
        base_records, drafter_records, figures=("decode_tok_s", "tpot_median_ms")
    )
    decode, tpot = changes["decode_tok_s"], changes["tpot_median_ms"]
    return {
        "decode_gain_lo_pct": decode.lo_pct,
        "decode_gain_hi_pct": decode.hi_pct,
        "verdict": decode.verdict,
        "p_value": decode.p_value,
        "gain_interval_source": f"paired randomization, {decode.common_prompts} prompts"
        + (f", {decode.unpaired} not paired (sent as other texts)" if decode.unpaired else ""),
        "tpot_change_pct": tpot.change_pct,
        "tpot_change_lo_pct": tpot.lo_pct,
        "tpot_change_hi_pct": tpot.hi_pct,
    }


def _repeated(metrics: CellMetrics) -> bool:
    return (metrics.get("repeats") or {}).get("done", 0) >= MIN_REPEATS


def repeat_gain_columns(base: CellMetrics, drafter: CellMetrics) -> dict[str, Any]:
    """Both cells repeated ≥ 3 times: the gain's interval from the repeats' figures (a
    t-interval on the difference of means), which includes start-to-start variance."""

    def values(metrics, name):
        return [f.get(name) for f in metrics["repeats"]["figures"]]

    decode = repeat_changes(
        values(base, "decode_tok_s"), values(drafter, "decode_tok_s"), "decode_tok_s"
    )
    tpot = repeat_changes(
        values(base, "tpot_median_ms"), values(drafter, "tpot_median_ms"), "tpot_median_ms"
    )
    return {
        "decode_gain_lo_pct": decode.lo_pct,
        "decode_gain_hi_pct": decode.hi_pct,
        "verdict": decode.verdict,
        "p_value": decode.p_value,
        "gain_interval_source": (
            f"repeats, {base['repeats']['done']} + {drafter['repeats']['done']} runs"
        ),
        "tpot_change_pct": tpot.change_pct,
        "tpot_change_lo_pct": tpot.lo_pct,
        "tpot_change_hi_pct": tpot.hi_pct,
    }


def pair_columns(
    base: CellMetrics | None,
    drafter: CellMetrics,
    records: Mapping[str, Sequence[RequestRecord]],
) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """A drafter cell against its base: what its row flags so far, its figures on the prompts
    both completed (`*_common`, none when they completed the same ones) and its gain's
    interval (from repeats, else paired over the prompts)."""
    flags: list[str] = []
    common: dict[str, Any] = {}
    paired: dict[str, Any] = {}
    if base is None:
        flags.append("no base cell")
    elif not base.get("status") == drafter.get("status") == Status.DONE:
        flags.append("a cell of the pair did not finish")
    else:
        if _weights_files(base) != _weights_files(drafter):
            flags.append("base and drafter cells used different weight files")
        if _repeated(base) and _repeated(drafter):
            paired = repeat_gain_columns(base, drafter)
        if base["cell"] in records and drafter["cell"] in records:
            runs = records[base["cell"]], records[drafter["cell"]]
            common = common_subset_figures(*runs)
            paired = paired or paired_gain_columns(*runs)
            if common:
                flags.append(
                    "different prompts completed: *_common columns compare the "
                    f"{common['common_prompts']} both completed"
                )
        elif base.get("prompt_indices") != drafter.get("prompt_indices"):
            flags.append("different prompt sets")
    return flags, common, paired


def spec_gain_table(
    all_metrics: Sequence[CellMetrics],
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
    outputs: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Each drafter cell beside its base (same model, engine, quant, workload, drafter none).
    With the cells' request `records`, pairs that completed different prompts also get their
    figures on the common subset. A pair resting on a disturbed cell says so (`flags` names
    the cell, `disturbed`); one whose greedy outputs changed (`outputs`, by drafter cell:
    outputs.fidelity.compared.drafter_output_verdicts) too."""
    records, outputs = records or {}, outputs or {}
    by_key = {
        (m.get("model"), m.get("engine"), m.get("quant"), m.get("workload")): m
        for m in all_metrics
        if m.get("drafter") == "none"
    }
    rows, series = [], []
    for m in all_metrics:
        if m.get("drafter") in (None, "none"):
            continue
        base = by_key.get((m.get("model"), m.get("engine"), m.get("quant"), m.get("workload")))
        flags, common, paired = pair_columns(base, m, records)
        if disturbed := disturbed_flag({"base cell": base, "drafter cell": m}):
            flags.append(disturbed)
        if outputs.get(m["cell"]) == CHANGED:
            flags.append(OUTPUTS_CHANGED_FLAG)
        if random_tokens := content_flag(m):
            flags.append(random_tokens)
        rows.append(
            {
                **gain_columns(base, m),
                **common,
                "flags": "; ".join(flags),
                **paired,
                "disturbed": bool(disturbed),
                "outputs": outputs.get(m["cell"]),
                "content": m.get("content"),
                **energy_change(base, m).columns(),
            }
        )
        series.append(m.get("series"))
    judge_series(rows, series, GAIN_KEYS)
    judge_series(rows, series, ENERGY_KEYS)
    return pd.DataFrame(rows, columns=SPEC_GAIN_COLUMNS)


def gain_columns(base: CellMetrics | None, drafter: CellMetrics) -> dict[str, Any]:
    """A spec_gain row's two cells, their headline figures and the gain between them."""
    spec = drafter.get("spec") or {}
    return {
        "drafter_cell": drafter["cell"],
        "base_cell": base["cell"] if base else None,
        **identity_columns(drafter),
        "base_decode_tok_s": base.get("decode_tok_s") if base else None,
        "drafter_decode_tok_s": drafter.get("decode_tok_s"),
        "decode_gain_pct": _gain_pct(
            drafter.get("decode_tok_s"), base.get("decode_tok_s") if base else None
        ),
        "base_ttft_median_ms": median_of(base, "ttft_ms") if base else None,
        "drafter_ttft_median_ms": median_of(drafter, "ttft_ms"),
        "base_tpot_median_ms": median_of(base, "tpot_ms") if base else None,
        "drafter_tpot_median_ms": median_of(drafter, "tpot_ms"),
        "acceptance_rate": spec.get("acceptance_rate"),
        "acceptance_length": spec.get("mean_acceptance_length"),
        # several tokens arrive per chunk when drafts are accepted: ITL per token
        "drafter_itl_per_token_median_ms": median_of(drafter, "itl_per_token_ms"),
    }


GAIN_KEYS = VerdictKeys(
    "p_value", "verdict", "p_adjusted", "verdict_unadjusted", "family", (FASTER, SLOWER),
    NO_DIFFERENCE,
)  # fmt: skip


def _weights_files(metrics: CellMetrics) -> list[str]:
    return [f.get("sha256") for f in (metrics.get("weights") or {}).get("files", [])]


# The drafter's gain on one kind of content, as gain_by_content.csv and the front page show it.
CONTENT_GAIN_COLUMNS = [
    "decode_gain_pct",
    "decode_gain_lo_pct",
    "decode_gain_hi_pct",
    "verdict",
    "acceptance_rate",
    "outputs",
]
GAIN_BY_CONTENT_COLUMNS = [
    *IDENTITY_COLUMNS,
    "content",
    "base_decode_tok_s",
    "drafter_decode_tok_s",
    *CONTENT_GAIN_COLUMNS,
    "flags",
]
GAIN_BY_CONTENT_TITLE = "The drafter's gain by what it drafts"
GAIN_BY_CONTENT_INTRO = (
    "Each drafter that ran on two or more kinds of content (chat: ShareGPT first turns; "
    "conversation: whole ShareGPT conversations; code: HumanEval; random tokens) at one model, "
    "engine and quant, its gain over its base on each (spec_gain's rows, sweep points and "
    "search probes aside). A drafter drafts from what the text is, so its acceptance and gain "
    "move with it; the gain on random tokens is not the gain on text."
)


def gain_by_content(spec_gain: pd.DataFrame, point_cells: set[str]) -> pd.DataFrame:
    """gain_by_content.csv: spec_gain's rows of drafters (model, engine, quant, drafter) whose
    cells outside `point_cells` (sweep points, search probes) ran on two or more contents."""
    rows = [r for r in spec_gain.to_dict("records") if r["drafter_cell"] not in point_cells]
    key = ("model", "engine", "quant", "drafter")
    contents: dict[tuple, set] = {}
    for row in rows:
        contents.setdefault(tuple(row[k] for k in key), set()).add(row["content"])
    kept = [r for r in rows if len(contents[tuple(r[k] for k in key)]) >= 2]
    return pd.DataFrame(kept, columns=GAIN_BY_CONTENT_COLUMNS)
