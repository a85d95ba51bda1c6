"""Whether a run was steady: decode tok/s per tenth of its requests, and whether the first and
last tenths differ beyond their 95 % intervals (the card's and the summary's check)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..loadgen.request_table import RequestTable
from .stats import RESAMPLES, SEED, Interval, RequestArrays, percentile_interval

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
    requests: RequestTable, arrays: RequestArrays, resamples: int = RESAMPLES, seed: int = SEED
) -> Stability | None:
    """Each tenth's rate is the run's decode tok/s scaled by that tenth's tokens per second of
    decode time (E2E − TTFT), the tenths in the order `requests` were sent (`arrays`: their
    `request_arrays`); None with fewer than 2 requests a tenth."""
    done = sorted(requests.done, key=lambda r: r.sent_s)
    order = {r.pair_key: i for i, r in enumerate(done)}
    if arrays.n < PARTS * MIN_PER_PART or len(order) != arrays.n:
        return None
    by_send = np.argsort([order[(int(p), int(t))] for p, t in arrays.keys], kind="stable")
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
