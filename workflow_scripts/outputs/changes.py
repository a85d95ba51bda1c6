"""The change between two cells with its 95 % interval and a verdict: from their repeats (a
t-interval), else paired over the prompts both completed (a randomization test for rates, exact,
where a paired bootstrap said "different" too often; a paired bootstrap for medians), else each
run's requests resampled on their own. Pure functions of request records; stdlib + numpy."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..loadgen.records import OK, RequestRecord, pair_requests
from ..loadgen.request_table import RequestTable
from .stats import (
    BOOTSTRAP,
    CHUNK_ELEMENTS,
    CONFIDENCE,
    FIGURES,
    HIGHER_IS_BETTER,
    MIN_REPEATS,
    RATE_FIGURES,
    RATE_TOKENS,
    REPEATS,
    RESAMPLES,
    SEED,
    RequestArrays,
    figures_of_draws,
    percentile_interval,
    point_figures,
    request_arrays,
    resampled,
    t975,
    t_two_sided_p,
)

RANDOMIZATION = "randomization"
RELABELINGS = 2048  # 2^11 relabelings of the pairs: the paired comparison's resolution
FASTER, SLOWER, NO_DIFFERENCE = "faster", "slower", "no detectable difference"


@dataclass(frozen=True)
class Change:
    """`new` relative to `base` in %, with its 95 % interval and what it says."""

    figure: str
    change_pct: float | None
    lo_pct: float | None
    hi_pct: float | None
    verdict: str | None
    common_prompts: int
    source: str = BOOTSTRAP
    unpaired: int = 0  # prompts both completed but sent as other texts: left out of the pairs
    p_value: float | None = None  # the two-sided test behind the verdict, where it gives one


def verdict(lo_pct: float | None, hi_pct: float | None, higher_is_better: bool) -> str | None:
    """faster / slower when the whole interval lies on one side of zero."""
    if lo_pct is None or hi_pct is None:
        return None
    if lo_pct > 0:
        return FASTER if higher_is_better else SLOWER
    if hi_pct < 0:
        return SLOWER if higher_is_better else FASTER
    return NO_DIFFERENCE


def relabeling_swaps(n: int, count: int = RELABELINGS, seed: int = SEED, rows: slice | None = None):
    """Which of n pairs to swap between the two runs, for `count` (rounded up to a power of two,
    2^k) relabelings that form a group: every XOR-combination of k seeded patterns, the identity
    (no swap) first. Rows `rows` only, so a caller can go through them in chunks."""
    k = max(1, math.ceil(math.log2(max(count, 2))))
    patterns = np.random.default_rng(seed).integers(0, 2, size=(k, n), dtype=np.int64) == 1
    # Row r combines the patterns of r's set bits: rows 2^j..2^(j+1)-1 are rows 0..2^j-1 with
    # pattern j added, so the table doubles k times (a product of bits cost 100x as much).
    table = np.zeros((2**k, n), dtype=bool)
    for j in range(k):
        table[2**j : 2 ** (j + 1)] = table[: 2**j] ^ patterns[j]
    return table[rows if rows is not None else slice(None)]


def _pooled(base: RequestArrays, new: RequestArrays) -> RequestArrays:
    """Both runs' arrays end to end (base at 0..n-1, new at n..2n-1), so a figure of any mix of
    the two is the figure of an index set; a rate's anchor (duration, the whole's tokens per
    second) is common to both halves and cancels in their ratio."""

    def both(name: str) -> np.ndarray:
        return np.concatenate([getattr(base, name), getattr(new, name)])

    fields = ("keys", "prompt_tokens", "completion_tokens", "ttft_ms", "tpot_ms", "e2e_ms")
    return RequestArrays(*(both(f) for f in fields), duration_s=1.0)


def randomization_p(spread: np.ndarray, observed: float) -> float:
    """The paired randomization test's two-sided p-value: the share of the relabelings (the
    identity among them) whose |log(new / base)| is at least the measured one's. Below 5 % exactly
    when the 95 % interval leaves out no change."""
    edge = abs(observed) * (1 - 1e-9)  # the identity's own figure, whatever its rounding
    return float((spread >= edge).sum() / len(spread))


def relabelled_log_ratios(
    base: RequestArrays,
    new: RequestArrays,
    figures: Sequence[str],
    count: int = RELABELINGS,
    seed: int = SEED,
) -> dict[str, np.ndarray]:
    """For each figure, |log(new / base)| over every relabeling of the pairs, sorted (an
    undefined one as infinity: never small)."""
    n = base.n
    pooled = _pooled(base, new)
    total = 2 ** max(1, math.ceil(math.log2(max(count, 2))))
    per_chunk = max(1, CHUNK_ELEMENTS // max(n, 1))
    parts: dict[str, list[np.ndarray]] = {name: [] for name in figures}
    own, other = np.arange(n)[None, :], np.arange(n, 2 * n)[None, :]
    for start in range(0, total, per_chunk):
        swap = relabeling_swaps(n, total, seed, slice(start, min(total, start + per_chunk)))
        if all(name in RATE_TOKENS for name in figures):
            sides = _relabelled_rates(pooled, n, swap, figures)
        else:
            new_side, base_side = np.where(swap, own, other), np.where(swap, other, own)
            sides = {
                name: (FIGURES[name][0](pooled, new_side), FIGURES[name][0](pooled, base_side))
                for name in figures
            }
        for name in figures:
            with np.errstate(divide="ignore", invalid="ignore"):
                log_ratio = np.log(sides[name][0] / sides[name][1])
            parts[name].append(np.abs(log_ratio))
    out = {}
    for name in figures:
        spread = np.concatenate(parts[name])
        out[name] = np.sort(np.where(np.isfinite(spread), spread, np.inf))  # undefined: never small
    return out


def _relabelled_rates(
    pooled: RequestArrays, n: int, swap: np.ndarray, figures: Sequence[str]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each rate figure of both sides of the relabelings `swap`, as FIGURES gives it on their
    index sets (the new side takes the base's request where a pair is swapped), with each
    side's sums as products of the swap pattern instead of gathers of 2 × relabelings × n."""
    swapped = swap.astype(float)
    e2e = np.nan_to_num(pooled.e2e_ms)

    def sides(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        base, new = values[:n], values[n:]
        moved = swapped @ (base - new)  # what the swapped pairs move from one side to the other
        return new.sum() + moved, base.sum() - moved

    e2e_new, e2e_base = sides(e2e)
    out = {}
    for name in figures:
        tok = RATE_TOKENS[name](pooled)
        headline = tok.sum() / pooled.duration_s
        whole = tok.sum() / e2e.sum() if e2e.sum() > 0 else math.nan
        tok_new, tok_base = sides(tok)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[name] = (
                headline * (tok_new / e2e_new) / whole,
                headline * (tok_base / e2e_base) / whole,
            )
    return out


def paired_changes(
    base_records: Sequence[RequestRecord],
    new_records: Sequence[RequestRecord],
    figures: Sequence[str] = ("decode_tok_s", "ttft_median_ms", "tpot_median_ms"),
    resamples: int = RESAMPLES,
    seed: int = SEED,
    relabelings: int = RELABELINGS,
) -> dict[str, Change]:
    """The change of each figure over the prompts both runs completed (each run's figures on
    those prompts, spanning their own duration, as the spec gain's *_common columns), with a
    95 % interval whose verdict calls two runs of one distribution different in at most 5 % of
    cases:

    - rates: a paired randomization test. log(new / base) ± the 95 % quantile of
      |log(new / base)| over relabelings that swap some prompts' two requests between the runs.
      The relabelings form a group, so for any data at most 5 % of its equally likely
      relabelings read as a difference: an exact test, whatever the number of prompts or the
      spread of their lengths (exact when a run's duration is its requests' summed time, at
      concurrency 1; otherwise up to the difference between the two). A paired bootstrap was not
      enough here: over 16,000 simulated pairs of runs of one distribution (100 prompts of 20-199
      tokens) it said `no detectable difference` for decode tok/s in 94.5 ± 0.2 % of them, and
      t- and bootstrap-t intervals did no better (the few long answers carry most of the
      variance). With a real difference the relabelings mix it into the spread, so the
      interval is then wider than it needs to be, never narrower.
    - medians and other quantiles: a paired percentile bootstrap over the prompts (each
      resample draws the same prompts from both runs). A quantile of a mix of the two runs
      sits between them, so relabelings of a few prompts cannot tell even a uniform change; the
      bootstrap's intervals for quantiles are conservative instead (no difference in 95.9 and
      96.1 % of 8000 such simulated pairs for TPOT and TTFT medians)."""
    pairing = pair_requests(base_records, new_records)
    common = pairing.keys
    base = request_arrays(RequestTable.of(base_records), common)
    new = request_arrays(RequestTable.of(new_records), common)
    n = base.n
    points_base, points_new = point_figures(base), point_figures(new)
    rates = [name for name in figures if name in RATE_FIGURES]
    quantiles = [name for name in figures if name not in RATE_FIGURES]
    spreads = relabelled_log_ratios(base, new, rates, relabelings, seed) if n >= 2 and rates else {}
    samples = {}
    if n >= 2 and quantiles:
        samples = resampled(lambda idx: _draw_ratios(base, new, quantiles, idx), n, resamples, seed)
    out = {}
    for name in figures:
        b, m = points_base[name], points_new[name]
        change = 100 * (m / b - 1) if b and m is not None else None
        source = RANDOMIZATION if name in RATE_FIGURES else BOOTSTRAP
        lo = hi = p = None
        if n >= 2 and change is not None and name in samples:
            interval = percentile_interval(samples[name], change, n)
            lo, hi = interval.lo, interval.hi
        elif n >= 2 and change is not None and m > 0 and name in spreads:
            lo, hi, p = randomization_interval(b, m, spreads[name])
        found = verdict(lo, hi, FIGURES[name][1])
        out[name] = Change(name, change, lo, hi, found, n, source, pairing.unpaired, p)
    return out


def _draw_ratios(
    base: RequestArrays, new: RequestArrays, quantiles: Sequence[str], idx: np.ndarray
) -> dict[str, np.ndarray]:
    """Each quantile's change (%) on the same drawn prompts of both runs."""
    drawn_new, drawn_base = (
        figures_of_draws(new, idx, quantiles),
        figures_of_draws(base, idx, quantiles),
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        return {name: 100 * (drawn_new[name] / drawn_base[name] - 1) for name in quantiles}


def randomization_interval(
    base: float, new: float, spread: np.ndarray
) -> tuple[float | None, float | None, float | None]:
    """log(new / base) ± the relabelings' 95 % quantile of |log(new / base)| (`spread`: how far
    the two runs' figures move apart by chance alone, when each prompt's two requests could as
    well have been served the other way round), as % changes, and the test's p-value; none
    where that quantile is undefined."""
    edge = float(spread[math.ceil(CONFIDENCE * len(spread)) - 1])
    if not math.isfinite(edge):
        return None, None, None
    center = math.log(new / base)
    lo, hi = 100 * (math.exp(center - edge) - 1), 100 * (math.exp(center + edge) - 1)
    return lo, hi, randomization_p(spread, center)


def _unpaired_changes(
    base_records: Sequence[RequestRecord],
    new_records: Sequence[RequestRecord],
    figures: Sequence[str],
    resamples: int,
    seed: int,
) -> dict[str, Change]:
    """Each run's completed requests resampled on their own (a draw of its own for each run),
    the change's interval from the ratio of the two runs' resampled figures."""
    base = request_arrays(RequestTable.of(base_records))
    new = request_arrays(RequestTable.of(new_records))
    points_base, points_new = point_figures(base), point_figures(new)

    def on(arrays: RequestArrays) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
        return lambda idx: figures_of_draws(arrays, idx, figures)

    enough = min(base.n, new.n) >= 2
    samples: dict[str, np.ndarray] = {}
    if enough:
        draws_base = resampled(on(base), base.n, resamples, seed)
        draws_new = resampled(on(new), new.n, resamples, seed + 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            samples = {name: 100 * (draws_new[name] / draws_base[name] - 1) for name in figures}
    out = {}
    for name in figures:
        b, m = points_base[name], points_new[name]
        change = 100 * (m / b - 1) if b and m is not None else None
        lo = hi = None
        if enough and change is not None:
            interval = percentile_interval(samples[name], change, min(base.n, new.n))
            lo, hi = interval.lo, interval.hi
        out[name] = Change(name, change, lo, hi, verdict(lo, hi, FIGURES[name][1]), 0, UNPAIRED)
    return out


def repeat_changes(
    base_values: Sequence[float], new_values: Sequence[float], figure: str
) -> Change:
    """Change between two cells measured ≥ 3 times each: Welch-style t-interval on the
    difference of means, as % of the base mean (delta method), when no records pair them."""
    b = [float(v) for v in base_values if v is not None]
    m = [float(v) for v in new_values if v is not None]
    if len(b) < 2 or len(m) < 2 or statistics.fmean(b) == 0:
        return Change(figure, None, None, None, None, 0, REPEATS)
    mb, mm = statistics.fmean(b), statistics.fmean(m)
    vb, vm = statistics.variance(b) / len(b), statistics.variance(m) / len(m)
    df = (vb + vm) ** 2 / ((vb**2 / (len(b) - 1)) + (vm**2 / (len(m) - 1))) if vb + vm else 1e9
    ratio = mm / mb
    # var(mm/mb) ≈ (vm + ratio² vb) / mb²
    half = 100 * t975(max(1, int(df))) * math.sqrt(vm + ratio**2 * vb) / mb
    spread = math.sqrt(vm + ratio**2 * vb) / abs(mb)  # the t statistic's denominator
    change = 100 * (ratio - 1)
    lo, hi = change - half, change + half
    if spread > 0:
        p = t_two_sided_p((ratio - 1) / spread, max(1, int(df)))
    else:
        p = 1.0 if ratio == 1 else 0.0
    found = verdict(lo, hi, HIGHER_IS_BETTER.get(figure, True))
    return Change(figure, change, lo, hi, found, 0, REPEATS, p_value=p)


# What the interval of a change between two cells rests on (comparison tables say it).
PAIRED_PROMPTS = "paired over prompts"
REPEATS_T = "t-interval over repeats"
UNPAIRED = "unpaired bootstrap over requests"
NO_INTERVAL = "none"


@dataclass(frozen=True)
class CellChanges:
    """B against A for some figures, the method their intervals come from, and its basis
    (`24 prompts`, `3 + 3 runs`, `20 + 18 requests`)."""

    changes: dict[str, Change]
    method: str
    basis: str


def cell_changes(
    base_repeats: Sequence[Mapping[str, float | None]],
    new_repeats: Sequence[Mapping[str, float | None]],
    base_records: Sequence[RequestRecord] | None,
    new_records: Sequence[RequestRecord] | None,
    figures: Sequence[str],
    same_prompts: bool = True,
    resamples: int = RESAMPLES,
) -> CellChanges:
    """The best-founded interval two cells allow: their repeats when both have ≥ 3 (the only
    one that holds start-to-start variance); else a paired bootstrap over the prompts both
    completed, when the indices name `same_prompts` and ≥ 2 pair (records.pair_requests: the
    same prompt text too); else each run's requests resampled on their own. The basis says how
    many were not paired. `*_repeats` are per-repeat figures (repeats.py)."""
    if len(base_repeats) >= MIN_REPEATS and len(new_repeats) >= MIN_REPEATS:
        changes = {
            figure: repeat_changes(
                [f.get(figure) for f in base_repeats], [f.get(figure) for f in new_repeats], figure
            )
            for figure in figures
        }
        return CellChanges(changes, REPEATS_T, f"{len(base_repeats)} + {len(new_repeats)} runs")
    if not base_records or not new_records:
        empty = {f: Change(f, None, None, None, None, 0, NO_INTERVAL) for f in figures}
        return CellChanges(empty, NO_INTERVAL, "")
    pairing = pair_requests(base_records, new_records)
    shared = len(pairing.pairs)
    left_out = f", {pairing.unpaired} not paired (sent as other texts)" if pairing.unpaired else ""
    if same_prompts and shared >= 2:
        changes = paired_changes(base_records, new_records, figures, resamples)
        return CellChanges(changes, PAIRED_PROMPTS, f"{shared} prompts{left_out}")
    changes = _unpaired_changes(base_records, new_records, figures, resamples, SEED)
    counts = (len(_completed(base_records)), len(_completed(new_records)))
    return CellChanges(changes, UNPAIRED, f"{counts[0]} + {counts[1]} requests{left_out}")


def _completed(records: Sequence[RequestRecord]) -> set[tuple[int, int]]:
    return {r.pair_key for r in records if r.status == OK and not r.warmup}
