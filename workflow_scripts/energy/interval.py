"""An interval on the steady state's joules per output token, from resampling it by time slices.

Under batching the energy of one request cannot be told apart from its neighbours', so the
requests cannot be resampled as the latency figures' bootstrap does. The steady window is cut
into equal slices instead (each at least two sampler intervals long, `SLICES` at most); each
slice has its joules (from the sampler's series) and the output tokens streamed in it; the
slices are drawn with replacement (seeded) and Σ joules / Σ tokens taken each time; the 2.5th and
97.5th percentiles are the interval. It sees the variation within one run only (slices next to
each other are alike, so it is if anything narrow); repeats give the interval across runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

SLICES = 20
MIN_SLICES = 5
RESAMPLES = 2000
SEED = 0
SOURCE = "time slices"


@dataclass(frozen=True)
class SliceInterval:
    """95 % interval of J per output token over the steady state, how many slices of how long,
    and why there is none (`reason`)."""

    lo: float | None
    hi: float | None
    slices: int
    slice_s: float | None
    resamples: int
    source: str = SOURCE
    reason: str = ""

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "reason": self.reason or None}


def slice_count(duration_s: float, interval_s: float, wanted: int = SLICES) -> int:
    """As many slices as fit with two sampler intervals each, `wanted` at most."""
    if interval_s <= 0:
        return wanted
    return max(0, min(wanted, math.floor(duration_s / (2 * interval_s))))


def ratio_interval(
    joules: Sequence[float],
    tokens: Sequence[float],
    slice_s: float,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> SliceInterval:
    """Percentile bootstrap of Σ joules / Σ tokens over the slices."""
    n = len(joules)
    if n != len(tokens):
        raise ValueError("one joules figure and one token count per slice")
    if n < MIN_SLICES:
        reason = f"{n} slice(s) of the steady state: fewer than {MIN_SLICES}, no interval"
        return SliceInterval(None, None, n, slice_s, 0, reason=reason)
    e, k = np.asarray(joules, dtype=float), np.asarray(tokens, dtype=float)
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    sums_k = k[idx].sum(axis=1)
    ratios = e[idx].sum(axis=1)[sums_k > 0] / sums_k[sums_k > 0]
    if not len(ratios):
        return SliceInterval(None, None, n, slice_s, resamples, reason="no output tokens")
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return SliceInterval(float(lo), float(hi), n, slice_s, resamples)
