"""95 % intervals for a cell's figures and for the change between two cells. Pure functions of
request records (or of per-repeat figures); stdlib + numpy only.

Two sources, said in every table (`interval_source`):
- `repeats`: ≥ 3 runs of a cell, each with its own server start -> a t-interval on their mean.
  It includes start-to-start variance, so it is the one to trust.
- `bootstrap`: one run -> resample its completed requests (seeded) and recompute the figure.
  It sees only request-to-request variance within that run.
A change between two runs of the same prompts (`paired_changes`) is a paired randomization test
for rates (exact, where a paired bootstrap said "different" too often) and a paired bootstrap
for medians.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..loadgen.metrics import tpot_s
from ..loadgen.records import OK, RequestRecord

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0
MIN_REPEATS = 3
REPEATS = "repeats"
BOOTSTRAP = "bootstrap"
RANDOMIZATION = "randomization"
RELABELINGS = 2048  # 2^11 relabelings of the pairs: the paired comparison's resolution
FASTER, SLOWER, NO_DIFFERENCE = "faster", "slower", "no detectable difference"

# t quantile at 0.975 for 1..30 degrees of freedom; beyond, a Cornish-Fisher expansion.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = statistics.NormalDist().inv_cdf(0.975)


def t975(df: int) -> float:
    """Two-sided 95 % Student t quantile (no scipy here)."""
    if df < 1:
        raise ValueError("a t-interval needs at least two values")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


@dataclass(frozen=True)
class Interval:
    """A figure with its 95 % interval, how it was obtained, and from how many samples."""

    value: float | None
    lo: float | None
    hi: float | None
    source: str
    n: int

    @property
    def half_width(self) -> float | None:
        if self.lo is None or self.hi is None:
            return None
        return (self.hi - self.lo) / 2


def t_interval(values: Sequence[float]) -> Interval:
    """Mean of repeats ± t·s/√n: what a repeat of the whole run would land near."""
    data = [float(v) for v in values if v is not None and not math.isnan(v)]
    if len(data) < 2:
        raise ValueError("a t-interval needs at least two values")
    mean = statistics.fmean(data)
    half = t975(len(data) - 1) * statistics.stdev(data) / math.sqrt(len(data))
    return Interval(mean, mean - half, mean + half, REPEATS, len(data))


def _expanded_percentiles(n: int) -> tuple[float, float]:
    """Hesterberg's expanded percentile bootstrap: the plain percentile interval is too narrow
    for small n (it uses z and a divisor n); widen its tail probability to match
    √(n/(n-1))·t_{n-1}, which brings coverage close to 95 % from n ≈ 10 up."""
    if n < 2:
        return 2.5, 97.5
    z = math.sqrt(n / (n - 1)) * t975(n - 1)
    tail = 1 - statistics.NormalDist().cdf(z)
    return 100 * tail, 100 * (1 - tail)


def percentile_interval(
    samples: np.ndarray, value: float | None, n: int, source: str = BOOTSTRAP
) -> Interval:
    finite = samples[np.isfinite(samples)]
    if value is None or not len(finite):
        return Interval(value, None, None, source, n)
    lo, hi = np.percentile(finite, _expanded_percentiles(n))
    return Interval(value, float(lo), float(hi), source, n)


# --- one run: what each figure is, as a function of per-request arrays --------------------


@dataclass(frozen=True)
class RequestArrays:
    """Completed measured requests of one run as aligned arrays (NaN where a value is absent),
    plus the run's duration, which its headline rates divide by."""

    prompt_index: np.ndarray
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    e2e_ms: np.ndarray
    duration_s: float

    @property
    def n(self) -> int:
        return len(self.prompt_index)


def request_arrays(
    records: Sequence[RequestRecord], prompts: set[int] | None = None
) -> RequestArrays:
    """Completed measured requests (optionally only `prompts`), sorted by prompt index so two
    runs of the same prompts line up; duration spans the measured requests kept, as in
    compute_metrics (all of them when `prompts` is None)."""
    measured = [r for r in records if not r.warmup]
    if prompts is not None:
        measured = [r for r in measured if r.prompt_index in prompts]
    ends = [r.sent_s + r.e2e_s for r in measured if r.e2e_s is not None]
    starts = [r.sent_s for r in measured]
    duration = (max(ends) - min(starts)) if ends and starts else 0.0
    done, seen = [], set()
    for r in sorted((r for r in measured if r.status == OK), key=lambda r: r.prompt_index):
        if r.prompt_index not in seen:  # one request per prompt for pairing
            seen.add(r.prompt_index)
            done.append(r)

    def column(values) -> np.ndarray:
        return np.array([math.nan if v is None else float(v) for v in values], dtype=float)

    return RequestArrays(
        prompt_index=np.array([r.prompt_index for r in done], dtype=int),
        prompt_tokens=column(r.prompt_tokens or 0 for r in done),
        completion_tokens=column(r.completion_tokens or 0 for r in done),
        ttft_ms=column(None if r.ttft_s is None else r.ttft_s * 1000 for r in done),
        tpot_ms=column(None if (t := tpot_s(r)) is None else t * 1000 for r in done),
        e2e_ms=column(None if r.e2e_s is None else r.e2e_s * 1000 for r in done),
        duration_s=duration,
    )


def _rate(tokens: Callable[[RequestArrays], np.ndarray]):
    """A rate figure (Σ tokens / the run's duration) over resampled requests.

    Holding the duration fixed and resampling tokens would show no spread at all when every
    request returns the same tokens (fixed prompts, temperature 0): the noise is in the time.
    So a resample's rate is the run's rate scaled by the resample's tokens per second of request
    time (Σ tokens / Σ e2e) relative to the whole run's; with the workers kept busy, throughput
    ≈ concurrency × Σ tokens / Σ e2e (Little's law), so this moves as the run's rate would."""

    def figure(arrays: RequestArrays, idx: np.ndarray) -> np.ndarray:
        if arrays.duration_s <= 0:
            return np.full(idx.shape[:-1], math.nan)
        tok, e2e = tokens(arrays), np.nan_to_num(arrays.e2e_ms)
        headline = tok.sum() / arrays.duration_s
        whole = tok.sum() / e2e.sum() if e2e.sum() > 0 else math.nan
        with np.errstate(divide="ignore", invalid="ignore"):
            return headline * (tok[idx].sum(-1) / e2e[idx].sum(-1)) / whole

    return figure


def nan_percentile(values: np.ndarray, q: float) -> np.ndarray:
    """Percentile along the last axis ignoring NaN, linear between ranks (as
    loadgen.metrics.percentile); np.nanpercentile loops in Python and is 50x slower here."""
    ordered = np.sort(values, axis=-1)  # NaN sorts last
    count = (~np.isnan(values)).sum(axis=-1)
    pos = np.maximum(count - 1, 0) * q / 100.0
    low = np.floor(pos).astype(int)
    high = np.minimum(low + 1, np.maximum(count - 1, 0))
    a = np.take_along_axis(ordered, low[..., None], axis=-1)[..., 0]
    b = np.take_along_axis(ordered, high[..., None], axis=-1)[..., 0]
    return np.where(count > 0, a + (b - a) * (pos - low), np.nan)


def _quantile(field: str, q: float):
    def figure(arrays: RequestArrays, idx: np.ndarray) -> np.ndarray:
        return nan_percentile(getattr(arrays, field)[idx], q)

    return figure


# Figures with a per-request basis, by their summary.csv names; True: higher is better.
FIGURES: dict[str, tuple[Callable, bool]] = {
    "decode_tok_s": (_rate(lambda a: a.completion_tokens), True),
    "prefill_tok_s": (_rate(lambda a: a.prompt_tokens), True),
    "req_per_s": (_rate(lambda a: np.ones_like(a.completion_tokens)), True),
    "ttft_median_ms": (_quantile("ttft_ms", 50), False),
    "ttft_p99_ms": (_quantile("ttft_ms", 99), False),
    "tpot_median_ms": (_quantile("tpot_ms", 50), False),
    "tpot_p99_ms": (_quantile("tpot_ms", 99), False),
    "e2el_median_ms": (_quantile("e2e_ms", 50), False),
}
HIGHER_IS_BETTER = {name: higher for name, (_, higher) in FIGURES.items()}
RATE_FIGURES = ("decode_tok_s", "prefill_tok_s", "req_per_s")  # Σ tokens (or requests) / time
# Figures with no per-request basis: an interval only from repeats.
REPEAT_ONLY_FIGURES = ("peak_mem_gib", "acceptance_rate", "acceptance_length")


def point_figures(arrays: RequestArrays) -> dict[str, float | None]:
    """Each figure on all the requests (the headline value; NaN -> None)."""
    everything = np.arange(arrays.n)[None, :]
    out = {}
    for name, (figure, _) in FIGURES.items():
        value = float(figure(arrays, everything)[0]) if arrays.n else math.nan
        out[name] = None if math.isnan(value) else value
    return out


def bootstrap_intervals(
    records: Sequence[RequestRecord], resamples: int = RESAMPLES, seed: int = SEED
) -> dict[str, Interval]:
    """Every figure of one run with a percentile bootstrap interval over its requests."""
    arrays = request_arrays(records)
    return bootstrap_arrays(arrays, resamples, seed)


def bootstrap_arrays(
    arrays: RequestArrays, resamples: int = RESAMPLES, seed: int = SEED
) -> dict[str, Interval]:
    points = point_figures(arrays)
    if arrays.n < 2:
        return {name: Interval(points[name], None, None, BOOTSTRAP, arrays.n) for name in FIGURES}
    samples = resampled(lambda idx: {n: f(arrays, idx) for n, (f, _) in FIGURES.items()},
                        arrays.n, resamples, seed)  # fmt: skip
    return {name: percentile_interval(samples[name], points[name], arrays.n) for name in FIGURES}


CHUNK_ELEMENTS = 2_000_000  # resample indices held at once: ~16 MB, whatever the run's size


def resampled(
    statistic: Callable[[np.ndarray], dict[str, np.ndarray]], n: int, resamples: int, seed: int
) -> dict[str, np.ndarray]:
    """`statistic` over `resamples` seeded draws of n indices with replacement, in chunks so a
    run of many thousand requests does not hold resamples × n indices at once."""
    rng = np.random.default_rng(seed)
    per_chunk = max(1, CHUNK_ELEMENTS // max(n, 1))
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, resamples, per_chunk):
        idx = rng.integers(0, n, size=(min(per_chunk, resamples - start), n))
        for name, values in statistic(idx).items():
            parts.setdefault(name, []).append(values)
    return {name: np.concatenate(values) for name, values in parts.items()}


# --- two cells: paired over the prompts both completed ------------------------------------


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
    patterns = np.random.default_rng(seed).integers(0, 2, size=(k, n), dtype=np.int64)
    picked = np.arange(2**k)[rows if rows is not None else slice(None)]
    coefficients = (picked[:, None] >> np.arange(k)[None, :]) & 1
    return (coefficients @ patterns) % 2 == 1


def _pooled(base: RequestArrays, new: RequestArrays) -> RequestArrays:
    """Both runs' arrays end to end (base at 0..n-1, new at n..2n-1), so a figure of any mix of
    the two is the figure of an index set; a rate's anchor (duration, the whole's tokens per
    second) is common to both halves and cancels in their ratio."""

    def both(name: str) -> np.ndarray:
        return np.concatenate([getattr(base, name), getattr(new, name)])

    fields = ("prompt_index", "prompt_tokens", "completion_tokens", "ttft_ms", "tpot_ms", "e2e_ms")
    return RequestArrays(*(both(f) for f in fields), duration_s=1.0)


def relabelled_spread(
    base: RequestArrays,
    new: RequestArrays,
    figures: Sequence[str],
    count: int = RELABELINGS,
    seed: int = SEED,
) -> dict[str, float]:
    """For each figure, the 95 % quantile of |log(new / base)| over the relabelings of the pairs:
    how far the two runs' figures move apart by chance alone when each prompt's two requests
    could as well have been served the other way round."""
    n = base.n
    pooled = _pooled(base, new)
    total = 2 ** max(1, math.ceil(math.log2(max(count, 2))))
    per_chunk = max(1, CHUNK_ELEMENTS // max(n, 1))
    parts: dict[str, list[np.ndarray]] = {name: [] for name in figures}
    own, other = np.arange(n)[None, :], np.arange(n, 2 * n)[None, :]
    for start in range(0, total, per_chunk):
        swap = relabeling_swaps(n, total, seed, slice(start, min(total, start + per_chunk)))
        new_side, base_side = np.where(swap, own, other), np.where(swap, other, own)
        for name in figures:
            figure = FIGURES[name][0]
            with np.errstate(divide="ignore", invalid="ignore"):
                log_ratio = np.log(figure(pooled, new_side) / figure(pooled, base_side))
            parts[name].append(np.abs(log_ratio))
    out = {}
    for name in figures:
        spread = np.concatenate(parts[name])
        spread = np.sort(np.where(np.isfinite(spread), spread, np.inf))  # undefined: never small
        out[name] = float(spread[math.ceil(CONFIDENCE * len(spread)) - 1])
    return out


def paired_changes(
    base_records: Sequence[RequestRecord],
    new_records: Sequence[RequestRecord],
    figures: Sequence[str] = ("decode_tok_s", "ttft_median_ms", "tpot_median_ms"),
    resamples: int = RESAMPLES,
    seed: int = SEED,
    relabelings: int = RELABELINGS,
    paired: bool = True,
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
    common = _completed(base_records) & _completed(new_records)
    base = request_arrays(base_records, common)
    new = request_arrays(new_records, common)
    n = base.n
    points_base, points_new = point_figures(base), point_figures(new)
    rates = [name for name in figures if name in RATE_FIGURES]
    quantiles = [name for name in figures if name not in RATE_FIGURES]

    def ratios(idx: np.ndarray) -> dict[str, np.ndarray]:
        with np.errstate(divide="ignore", invalid="ignore"):
            return {
                name: 100 * (FIGURES[name][0](new, idx) / FIGURES[name][0](base, idx) - 1)
                for name in quantiles
            }

    spread = relabelled_spread(base, new, rates, relabelings, seed) if n >= 2 and rates else {}
    samples = resampled(ratios, n, resamples, seed) if n >= 2 and quantiles else {}
    out = {}
    for name in figures:
        b, m = points_base[name], points_new[name]
        change = 100 * (m / b - 1) if b and m is not None else None
        source = RANDOMIZATION if name in RATE_FIGURES else BOOTSTRAP
        lo = hi = None
        if n >= 2 and change is not None and name in samples:
            interval = percentile_interval(samples[name], change, n)
            lo, hi = interval.lo, interval.hi
        elif n >= 2 and change is not None and m > 0 and math.isfinite(spread.get(name, math.inf)):
            center = math.log(m / b)
            lo = 100 * (math.exp(center - spread[name]) - 1)
            hi = 100 * (math.exp(center + spread[name]) - 1)
        found = verdict(lo, hi, FIGURES[name][1])
        out[name] = Change(name, change, lo, hi, found, n, source)
    return out


def _unpaired_changes(
    base_records: Sequence[RequestRecord],
    new_records: Sequence[RequestRecord],
    figures: Sequence[str],
    resamples: int,
    seed: int,
) -> dict[str, Change]:
    """Each run's completed requests resampled on their own (a draw of its own for each run),
    the change's interval from the ratio of the two runs' resampled figures."""
    base, new = request_arrays(base_records), request_arrays(new_records)
    points_base, points_new = point_figures(base), point_figures(new)

    def on(arrays: RequestArrays) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
        return lambda idx: {name: FIGURES[name][0](arrays, idx) for name in figures}

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
    change = 100 * (ratio - 1)
    lo, hi = change - half, change + half
    return Change(
        figure, change, lo, hi, verdict(lo, hi, HIGHER_IS_BETTER.get(figure, True)), 0, REPEATS
    )


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
    completed, when the indices name `same_prompts` and ≥ 2 are shared; else each run's
    requests resampled on their own. `*_repeats` are per-repeat figures (repeats.py)."""
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
    shared = len(_completed(base_records) & _completed(new_records))
    if same_prompts and shared >= 2:
        changes = paired_changes(base_records, new_records, figures, resamples)
        return CellChanges(changes, PAIRED_PROMPTS, f"{shared} prompts")
    changes = paired_changes(base_records, new_records, figures, resamples, paired=False)
    counts = (len(_completed(base_records)), len(_completed(new_records)))
    return CellChanges(changes, UNPAIRED, f"{counts[0]} + {counts[1]} requests")


def _completed(records: Sequence[RequestRecord]) -> set[int]:
    return {r.prompt_index for r in records if r.status == OK and not r.warmup}


def interval_from_repeats(values: Sequence[float | None]) -> Interval | None:
    """The repeats' t-interval when there are enough of them, else None (use the bootstrap)."""
    data = [v for v in values if v is not None and not math.isnan(v)]
    return t_interval(data) if len(data) >= MIN_REPEATS else None


def as_columns(intervals: Mapping[str, Interval]) -> dict[str, float | None]:
    """`<figure>_lo` / `<figure>_hi` columns for a table row."""
    out: dict[str, float | None] = {}
    for name, interval in intervals.items():
        out[f"{name}_lo"], out[f"{name}_hi"] = interval.lo, interval.hi
    return out


# --- stability within a run ---------------------------------------------------------------

PARTS = 10
MIN_PER_PART = 2


@dataclass(frozen=True)
class Stability:
    """Decode tok/s per tenth of a run's requests (in the order they were sent), and whether
    the first and last tenths differ beyond their 95 % intervals (warm-up not over,
    throttling, memory pressure, another job on the machine)."""

    parts_tok_s: list[float]
    first: Interval
    last: Interval
    flagged: bool

    @property
    def change_pct(self) -> float | None:
        if not self.first.value or self.last.value is None:
            return None
        return 100 * (self.last.value / self.first.value - 1)

    def note(self) -> str:
        if not self.flagged:
            return ""
        return (
            f"decode tok/s moved {self.change_pct:+.0f} % from the first tenth of the requests "
            f"({self.first.value:.1f}) to the last ({self.last.value:.1f}), beyond both intervals"
        )


def _decode_speed(arrays: RequestArrays, idx: np.ndarray) -> np.ndarray:
    """Decode tok/s anchored as the rate figures, but on decode time alone: Σ (tokens − 1) /
    Σ (E2E − TTFT). Prefill is left out so a tenth holding long prompts does not read as a
    slowdown of the server."""
    if arrays.duration_s <= 0:
        return np.full(idx.shape[:-1], math.nan)
    tokens = np.maximum(arrays.completion_tokens - 1, 0)
    busy = np.nan_to_num(arrays.e2e_ms - arrays.ttft_ms)
    headline = arrays.completion_tokens.sum() / arrays.duration_s
    whole = tokens.sum() / busy.sum() if busy.sum() > 0 else math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        return headline * (tokens[idx].sum(-1) / busy[idx].sum(-1)) / whole


def stability(
    records: Sequence[RequestRecord], resamples: int = RESAMPLES, seed: int = SEED
) -> Stability | None:
    """Each tenth's rate is the run's decode tok/s scaled by that tenth's tokens per second of
    decode time (E2E − TTFT); None with fewer than 2 requests a tenth."""
    arrays = request_arrays(records)
    done = sorted((r for r in records if r.status == OK and not r.warmup), key=lambda r: r.sent_s)
    order = {r.prompt_index: i for i, r in enumerate(done)}
    if arrays.n < PARTS * MIN_PER_PART or len(order) != arrays.n:
        return None
    by_send = np.argsort([order[int(p)] for p in arrays.prompt_index], kind="stable")
    parts = np.array_split(by_send, PARTS)
    figure = _decode_speed
    parts_tok_s = [float(figure(arrays, part[None, :])[0]) for part in parts]
    rng = np.random.default_rng(seed)

    def part_interval(part: np.ndarray) -> Interval:
        idx = part[rng.integers(0, len(part), size=(resamples, len(part)))]
        value = float(figure(arrays, part[None, :])[0])
        return percentile_interval(figure(arrays, idx), value, len(part))

    first, last = part_interval(parts[0]), part_interval(parts[-1])
    apart = None not in (first.lo, first.hi, last.lo, last.hi) and (
        last.hi < first.lo or last.lo > first.hi
    )
    return Stability(parts_tok_s, first, last, bool(apart))
