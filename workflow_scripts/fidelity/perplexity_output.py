"""What `llama-perplexity` prints, read as tools/perplexity/perplexity.cpp of the pinned llama.cpp
tree prints it: the base run's chunks and perplexity (`parse_base`), a `--kl-divergence` run's
perplexity, KL divergence (mean with its standard error, percentiles), same-top-token share and
RMS Δp (`parse_kld`). A figure missing, or printed as `nan` or `inf`, is an error naming it: the
tool exits 0 after many of its failures (a text too short, a logits file it cannot read, too few
tokens for statistics, logits that overflowed)."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any


class PerplexityError(RuntimeError):
    """llama-perplexity failed, or its output lacks a figure the record needs."""


_NUMBER = r"([-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf))"
_PLUS_MINUS = r"\s*(?:±|\+/-)\s*"
_CHUNKS = re.compile(r"(?:computing|calculating perplexity) over (\d+) chunks, n_ctx=(\d+)")
_BASE_PPL = re.compile(r"Final estimate: PPL = " + _NUMBER + _PLUS_MINUS + _NUMBER)
_STAT = {
    "perplexity": re.compile(r"^Mean PPL\(Q\)\s*:\s*" + _NUMBER + _PLUS_MINUS + _NUMBER, re.M),
    "perplexity_base": re.compile(
        r"^Mean PPL\(base\)\s*:\s*" + _NUMBER + _PLUS_MINUS + _NUMBER, re.M
    ),
    "kld_mean": re.compile(r"^Mean\s+KLD:\s*" + _NUMBER + _PLUS_MINUS + _NUMBER, re.M),
    "same_top_pct": re.compile(r"^Same top p:\s*" + _NUMBER + _PLUS_MINUS + _NUMBER, re.M),
    "delta_p_rms_pct": re.compile(r"^RMS Δp\s*:\s*" + _NUMBER + _PLUS_MINUS + _NUMBER, re.M),
}
# `Maximum KLD`, `99.9%   KLD`, ..., `Median  KLD`, ..., `Minimum KLD`, as the tool names them.
_KLD_POINT = re.compile(r"^\s*(Maximum|Minimum|Median|\d+(?:\.\d+)?%)\s+KLD:\s*" + _NUMBER, re.M)
_KLD_NAMES = {"Maximum": "max", "Minimum": "min", "Median": "median"}
_ERROR_HINT = re.compile(r"error|failed|need at least|only \d+ tokens|unable|inconsistent", re.I)


@dataclass(frozen=True)
class BaseFigures:
    """What the `--kl-divergence-base` run says: its chunks of `ctx` tokens and the reference's
    perplexity over their scored halves."""

    chunks: int
    ctx: int
    perplexity: float
    perplexity_err: float


@dataclass(frozen=True)
class KldFigures:
    """What the `--kl-divergence` run says, each with the tool's own uncertainty where it prints
    one; `kld_percentiles` by the tool's names (`99.0`, `median`, `max`, ...)."""

    chunks: int
    ctx: int
    perplexity: float
    perplexity_err: float
    perplexity_base: float
    perplexity_base_err: float
    kld_mean: float
    kld_mean_err: float
    kld_percentiles: dict[str, float]
    same_top_pct: float
    same_top_pct_err: float
    delta_p_rms_pct: float
    delta_p_rms_pct_err: float

    @property
    def kld_p99(self) -> float:
        return self.kld_percentiles["99.0"]

    @property
    def kld_max(self) -> float:
        return self.kld_percentiles["max"]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kld_p99": self.kld_p99, "kld_max": self.kld_max}


def _missing(output: str, what: str) -> PerplexityError:
    """A figure the output lacks, with the tool's own complaint where it printed one."""
    hints = [line.strip() for line in output.splitlines() if _ERROR_HINT.search(line)]
    said = f"; it said: {' | '.join(hints[-3:])}" if hints else ""
    return PerplexityError(f"llama-perplexity printed no {what}{said}")


def _finite(figures: dict[str, float]) -> None:
    """Every figure a number: a `nan` or `inf` the tool printed fails the step, naming it."""
    for name, value in figures.items():
        if not math.isfinite(value):
            raise PerplexityError(f"llama-perplexity printed {name} = {value}: no finite figure")


def _chunks(output: str) -> tuple[int, int]:
    found = _CHUNKS.search(output)
    if not found:
        raise _missing(output, "'computing over N chunks, n_ctx=C' line")
    return int(found.group(1)), int(found.group(2))


def parse_base(output: str) -> BaseFigures:
    """The figures of a `--kl-divergence-base` run's output (stdout and stderr together)."""
    chunks, ctx = _chunks(output)
    found = _BASE_PPL.search(output)
    if not found:
        raise _missing(output, "'Final estimate: PPL' line")
    perplexity, err = float(found.group(1)), float(found.group(2))
    _finite({"perplexity": perplexity, "perplexity_err": err})
    return BaseFigures(chunks, ctx, perplexity, err)


def parse_kld(output: str) -> KldFigures:
    """The figures of a `--kl-divergence` run's output (stdout and stderr together)."""
    chunks, ctx = _chunks(output)
    figures: dict[str, float] = {}
    for name, pattern in _STAT.items():
        found = pattern.search(output)
        if not found:
            raise _missing(output, f"{name} ('{pattern.pattern.split(':')[0].lstrip('^')}')")
        figures[name], figures[f"{name}_err"] = float(found.group(1)), float(found.group(2))
    points = {
        _KLD_NAMES.get(name, name.rstrip("%")): float(value)
        for name, value in _KLD_POINT.findall(output)
    }
    for needed in ("99.0", "max", "median"):
        if needed not in points:
            raise _missing(output, f"KLD {needed} line")
    _finite({**figures, **{f"KLD {name}": value for name, value in points.items()}})
    return KldFigures(chunks=chunks, ctx=ctx, kld_percentiles=points, **figures)
