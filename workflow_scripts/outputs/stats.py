"""95 % intervals for a cell's figures and for the change between two cells. Pure functions of
a run's requests (their table, loadgen.request_table) or of per-repeat figures; stdlib + numpy
only.

The change between two cells is changes.py; a run's steadiness is stability.py. A proportion's
interval (Wilson's) and a ratio of sums over requests (the drafter's acceptance at a sweep
point, outputs/sweeps/gain.py) are here too.

Two sources, said in every table (`interval_source`):
- `repeats`: ≥ 3 runs of a cell, each with its own server start -> a t-interval on their mean.
  It includes start-to-start variance, so it is the one to trust.
- `bootstrap`: one run -> resample its completed requests (seeded) and recompute the figure.
  It sees only request-to-request variance within that run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..loadgen.records import OK
from ..loadgen.request_table import RequestTable

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0
MIN_REPEATS = 3
REPEATS = "repeats"
BOOTSTRAP = "bootstrap"

# t quantile at 0.975 for 1..30 degrees of freedom; beyond, a Cornish-Fisher expansion.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
Z975 = statistics.NormalDist().inv_cdf(0.975)  # the normal's two-sided 95 % quantile


def t975(df: int) -> float:
    """Two-sided 95 % Student t quantile (no scipy here)."""
    if df < 1:
        raise ValueError("a t-interval needs at least two values")
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's T with df degrees of freedom: the regularized incomplete beta
    I_x(df/2, 1/2) at x = df / (df + t^2) (a continued fraction, no scipy here)."""
    if df <= 0:
        raise ValueError("a t-test needs at least one degree of freedom")
    if math.isinf(t):
        return 0.0
    if df > 1e7:  # T is normal to within the float's precision
        return math.erfc(abs(t) / math.sqrt(2))
    return _incomplete_beta(df / (df + t * t), df / 2, 0.5)


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) by its continued fraction (Lentz), on the side where it converges fast."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(1 - x, b, a)
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 400):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * fraction / a


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

    keys: np.ndarray  # each request's RequestRecord.pair_key, one row (prompt index, turn) each
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    e2e_ms: np.ndarray
    duration_s: float

    @property
    def n(self) -> int:
        return len(self.keys)


def request_arrays(
    requests: RequestTable, prompts: set[tuple[int, int]] | None = None
) -> RequestArrays:
    """Completed measured requests (optionally only those whose pair keys are in `prompts`),
    sorted by pair key so two runs of the same prompts (and conversation turns) line up;
    duration spans the measured requests kept, as in compute_metrics (all of them when
    `prompts` is None)."""
    measured = requests.measured
    if prompts is not None:
        measured = [r for r in measured if r.pair_key in prompts]
    ends = [r.sent_s + r.e2e_s for r in measured if r.e2e_s is not None]
    starts = [r.sent_s for r in measured]
    duration = (max(ends) - min(starts)) if ends and starts else 0.0
    done, seen = [], set()
    for r in sorted((r for r in measured if r.status == OK), key=lambda r: r.pair_key):
        if r.pair_key not in seen:  # one request per prompt (and turn) for pairing
            seen.add(r.pair_key)
            done.append(r)

    def column(values) -> np.ndarray:
        return np.array([math.nan if v is None else float(v) for v in values], dtype=float)

    return RequestArrays(
        keys=np.array([r.pair_key for r in done], dtype=int).reshape(len(done), 2),
        prompt_tokens=column(r.prompt_tokens or 0 for r in done),
        completion_tokens=column(r.completion_tokens or 0 for r in done),
        ttft_ms=column(None if r.ttft_s is None else r.ttft_s * 1000 for r in done),
        tpot_ms=column(None if r.tpot_s is None else r.tpot_s * 1000 for r in done),
        e2e_ms=column(None if r.e2e_s is None else r.e2e_s * 1000 for r in done),
        duration_s=duration,
    )


def arrays_of(requests: RequestTable | None) -> RequestArrays | None:
    """A run's `request_arrays`, None for a run with no records (nothing to resample)."""
    return request_arrays(requests) if requests is not None and requests.rows else None


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
    return sorted_percentile(ordered, (~np.isnan(values)).sum(axis=-1), q)


def sorted_percentile(ordered: np.ndarray, count: np.ndarray, q: float) -> np.ndarray:
    """`nan_percentile` of rows already sorted (NaN last), `count` the non-NaN values a row."""
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


# The tokens each rate figure counts, and the field and percentile of each latency figure.
RATE_TOKENS: dict[str, Callable[[RequestArrays], np.ndarray]] = {
    "decode_tok_s": lambda a: a.completion_tokens,
    "prefill_tok_s": lambda a: a.prompt_tokens,
    "req_per_s": lambda a: np.ones_like(a.completion_tokens),
}
QUANTILES: dict[str, tuple[str, float]] = {
    "ttft_median_ms": ("ttft_ms", 50),
    "ttft_p99_ms": ("ttft_ms", 99),
    "tpot_median_ms": ("tpot_ms", 50),
    "tpot_p99_ms": ("tpot_ms", 99),
    "e2el_median_ms": ("e2e_ms", 50),
}
# Figures with a per-request basis, by their summary.csv names; True: higher is better.
FIGURES: dict[str, tuple[Callable, bool]] = {
    **{name: (_rate(tokens), True) for name, tokens in RATE_TOKENS.items()},
    **{name: (_quantile(*where), False) for name, where in QUANTILES.items()},
}
HIGHER_IS_BETTER = {name: higher for name, (_, higher) in FIGURES.items()}
RATE_FIGURES = tuple(RATE_TOKENS)  # Σ tokens (or requests) / time
# Figures with no per-request basis: an interval only from repeats.
REPEAT_ONLY_FIGURES = ("peak_mem_gib", "acceptance_rate", "acceptance_length")


def figures_of_draws(
    arrays: RequestArrays, idx: np.ndarray, names: Sequence[str]
) -> dict[str, np.ndarray]:
    """FIGURES[name] of the draws `idx` for each of `names`, value for value, sharing what they
    have in common: the drawn requests' time is summed once for every rate, each latency field
    is sorted once for all its percentiles. The summary bootstraps every cell this way: about
    24 instead of 41 ms a cell of 200 requests (docs/measured.md, sweep tables at scale)."""
    out: dict[str, np.ndarray] = {}
    rows, n = idx.shape[:-1], idx.shape[-1]
    rates = [name for name in names if name in RATE_TOKENS]
    fields: dict[str, list[str]] = {}
    for name in names:
        if name in QUANTILES:
            fields.setdefault(QUANTILES[name][0], []).append(name)
    drawn = {field: getattr(arrays, field)[idx] for field in fields}
    if rates and arrays.duration_s <= 0:
        out.update({name: np.full(rows, math.nan) for name in rates})
    elif rates:
        e2e = np.nan_to_num(arrays.e2e_ms)
        # the E2E draws the median needs too, summed before they are sorted (NaN as 0)
        drawn_e2e = drawn["e2e_ms"] if "e2e_ms" in drawn else arrays.e2e_ms[idx]
        drawn_e2e_sum = np.where(np.isnan(drawn_e2e), 0.0, drawn_e2e).sum(-1)
        for name in rates:
            tok = RATE_TOKENS[name](arrays)
            headline = tok.sum() / arrays.duration_s
            whole = tok.sum() / e2e.sum() if e2e.sum() > 0 else math.nan
            # a count of requests sums to n whichever were drawn: no need to draw it
            drawn_tok = np.full(rows, float(n)) if (tok == 1).all() else tok[idx].sum(-1)
            with np.errstate(divide="ignore", invalid="ignore"):
                out[name] = headline * (drawn_tok / drawn_e2e_sum) / whole
    for field, members in fields.items():
        values = drawn[field]
        values.sort(axis=-1)  # NaN last
        if np.isnan(getattr(arrays, field)).any():
            count = (~np.isnan(values)).sum(axis=-1)
        else:
            count = np.full(rows, n)
        for name in members:
            out[name] = sorted_percentile(values, count, QUANTILES[name][1])
    return out


def point_figures(arrays: RequestArrays) -> dict[str, float | None]:
    """Each figure on all the requests (the headline value; NaN -> None)."""
    everything = np.arange(arrays.n)[None, :]
    out = {}
    for name, (figure, _) in FIGURES.items():
        value = float(figure(arrays, everything)[0]) if arrays.n else math.nan
        out[name] = None if math.isnan(value) else value
    return out


def bootstrap_intervals(
    arrays: RequestArrays,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    figures: Sequence[str] | None = None,
) -> dict[str, Interval]:
    """Every figure of one run (or those named) with a percentile bootstrap interval over its
    requests (`request_arrays`). A figure's interval is the same whichever others are asked
    for with it."""
    names = list(FIGURES) if figures is None else list(figures)
    points = point_figures(arrays)
    if arrays.n < 2:
        return {name: Interval(points[name], None, None, BOOTSTRAP, arrays.n) for name in names}
    samples = resampled(lambda idx: figures_of_draws(arrays, idx, names),
                        arrays.n, resamples, seed)  # fmt: skip
    return {name: percentile_interval(samples[name], points[name], arrays.n) for name in names}


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


def interval_from_repeats(values: Sequence[float | None]) -> Interval | None:
    """The repeats' t-interval when there are enough of them, else None (use the bootstrap)."""
    data = [v for v in values if v is not None and not math.isnan(v)]
    return t_interval(data) if len(data) >= MIN_REPEATS else None


def ratio_interval(accepted: np.ndarray, drafted: np.ndarray) -> tuple[float, float] | None:
    """95 % interval of Σ accepted / Σ drafted over requests, each request one draw (a ratio
    estimator's delta-method variance, Σ (a_i − R d_i)² / (n (n − 1) d̄²)): drafts within a
    request go together, the requests are what varies."""
    n = len(drafted)
    if n < 2 or drafted.sum() <= 0:
        return None
    rate = accepted.sum() / drafted.sum()
    variance = ((accepted - rate * drafted) ** 2).sum() / (n * (n - 1) * drafted.mean() ** 2)
    half = t975(n - 1) * math.sqrt(variance)
    return rate - half, rate + half


def as_columns(intervals: Mapping[str, Interval]) -> dict[str, float | None]:
    """`<figure>_lo` / `<figure>_hi` columns for a table row."""
    out: dict[str, float | None] = {}
    for name, interval in intervals.items():
        out[f"{name}_lo"], out[f"{name}_hi"] = interval.lo, interval.hi
    return out
