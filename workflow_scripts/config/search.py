"""A latency-goal search (`workloads.<w>.search`): the largest load of a series that passes its
goal, found by probing upward (doubling from `min`, clamped at `max`) until a point does not
pass, then bisecting between the largest pass and that point (to an integer concurrency; a
rate to a relative `tolerance`).

Probes are keyed by what they measure, `(load, extension)`: extension 0 is the first run at a
load, extension k a run of the same load with `extension_factor`^k times the prompts, asked
for while the run before it at that load was `unresolved`, up to `max_extensions`. The verdict
of a load is that of its last extension walked. A load still unresolved at the cap is "not
shown to pass": the search bisects below it and lists it as undecided.

The planner replays the search from scratch over the verdicts it is given and asks for the
first key it lacks. So the same verdicts give the same plan, it only asks for keys a search
from scratch would, and a changed goal (new verdicts for the probes already measured)
re-decides from those first and measures only what the new walk reaches beyond them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..slo.objectives import Slo
from ..slo.verdict import Verdict
from ..vocabulary import ConfigError
from .sweeps import AXES, point_part

Load = int | float
ProbeKey = tuple[Load, int]  # (load, extension)

CONCURRENCY, REQUEST_RATE = AXES
SEARCH_KEYS = ("over", "min", "max", "tolerance", "max_extensions", "extension_factor")
DEFAULT_MAX_EXTENSIONS = 2
DEFAULT_EXTENSION_FACTOR = 2.0
# Caps (the schema states them too): at most 4 extensions of at most 4x each, so the last run of
# an unresolved load has at most 4**4 = 256 times the prompts of its first.
MAX_EXTENSIONS_CAP = 4
EXTENSION_FACTOR_CAP = 4.0
RATE_DIGITS = 6  # a rate probe's load, rounded as `point_part` writes it (`:g`): key = name
MIN_RATE = 1e-4  # the smallest rate `:g` writes without an exponent (1e-05 is `1e-05`)


@dataclass(frozen=True)
class SearchSpec:
    """Where a series' search looks and how hard it tries on an unresolved point."""

    over: str  # concurrency | request_rate
    min: Load
    max: Load
    tolerance: float | None = None  # request_rate: stop when (hi - lo) <= tolerance * hi
    max_extensions: int = DEFAULT_MAX_EXTENSIONS
    extension_factor: float = DEFAULT_EXTENSION_FACTOR

    @property
    def letter(self) -> str:
        """`c` or `r`, as a point's name has it."""
        return "c" if self.over == CONCURRENCY else "r"

    def label(self, load: Load) -> str:
        """`c8`, `r2.5`."""
        return point_part("", self.over, load).removeprefix("-")

    def prompts_for(self, num_prompts: int, extension: int) -> int:
        """The prompts of extension k of a probe whose first run has `num_prompts`."""
        return max(num_prompts, math.ceil(num_prompts * self.extension_factor**extension))

    def probe_part(self, workload: str, key: ProbeKey) -> str:
        """The workload part of a probe's cell id: `w-c8`, `w-c8-x1` (extension 1), `w-r2.5`."""
        load, extension = key
        part = point_part(workload, self.over, load)
        return f"{part}-x{extension}" if extension else part

    def to_dict(self) -> dict[str, Any]:
        return {
            "over": self.over,
            "min": self.min,
            "max": self.max,
            "tolerance": self.tolerance,
            "max_extensions": self.max_extensions,
            "extension_factor": self.extension_factor,
        }

    @property
    def text(self) -> str:
        """`concurrency 1..64`, `request_rate 0.5..16 to 5 %`."""
        out = f"{self.over} {self.min:g}..{self.max:g}"
        if self.tolerance is not None:
            out += f" to {100 * self.tolerance:g} %"
        return out

    @classmethod
    def from_config(
        cls, mapping: Any, where: str, workload: Mapping[str, Any] | None = None
    ) -> SearchSpec:
        """The search a config's `search` mapping states; `where` is its key path
        (`workloads.w.search`), `workload` the mapping it sits in (a sweep or a fixed rate beside
        it is refused). Raises ConfigError naming the key."""
        if not isinstance(mapping, Mapping):
            raise ConfigError(
                f"config key '{where}': a mapping {{over, min, max}}, not {mapping!r}"
            )
        for key in mapping:
            if key not in SEARCH_KEYS:
                raise ConfigError(
                    f"config key '{where}.{key}': unknown; a search takes {', '.join(SEARCH_KEYS)}"
                )
        for key in ("over", "min", "max"):
            if key not in mapping:
                raise ConfigError(f"config key '{where}.{key}': missing")
        over = mapping["over"]
        if over not in AXES:
            raise ConfigError(
                f"config key '{where}.over': {over!r}; a search is over {' or '.join(AXES)}"
            )
        low = _load(mapping["min"], over, f"{where}.min")
        high = _load(mapping["max"], over, f"{where}.max")
        if high < low:
            raise ConfigError(f"config key '{where}.max': {high:g} is below min {low:g}")
        tolerance = mapping.get("tolerance")
        if over == REQUEST_RATE:
            if tolerance is None:
                raise ConfigError(
                    f"config key '{where}.tolerance': missing; a rate search bisects to a stated "
                    "relative tolerance (e.g. 0.05)"
                )
            tolerance = _number(tolerance, f"{where}.tolerance")
            if not 0.0 < tolerance < 1.0:
                raise ConfigError(
                    f"config key '{where}.tolerance': {tolerance:g} is not in (0, 1): it is the "
                    "gap left between the largest passing and the smallest failing rate, relative "
                    "to the latter"
                )
        elif tolerance is not None:
            raise ConfigError(
                f"config key '{where}.tolerance': a concurrency search bisects to an integer; "
                "a tolerance is for a request_rate search"
            )
        extensions = mapping.get("max_extensions", DEFAULT_MAX_EXTENSIONS)
        if isinstance(extensions, bool) or not isinstance(extensions, int) or extensions < 0:
            raise ConfigError(
                f"config key '{where}.max_extensions': {extensions!r} is not a count (0 or more)"
            )
        if extensions > MAX_EXTENSIONS_CAP:
            raise ConfigError(
                f"config key '{where}.max_extensions': {extensions}; at most "
                f"{MAX_EXTENSIONS_CAP} (each extension reruns a load with more prompts)"
            )
        factor = _number(
            mapping.get("extension_factor", DEFAULT_EXTENSION_FACTOR), f"{where}.extension_factor"
        )
        if not 1.0 < factor <= EXTENSION_FACTOR_CAP:
            raise ConfigError(
                f"config key '{where}.extension_factor': {factor:g}; an extension runs more "
                f"prompts than the run before it: a factor above 1 and at most "
                f"{EXTENSION_FACTOR_CAP:g}"
            )
        if workload is not None:
            _check_beside(workload, over, where.rpartition(".")[0] or where)
        return cls(over, low, high, tolerance, extensions, factor)

    def clamp(self, load: Load) -> Load:
        return min(self.normal(load), self.max)

    def normal(self, load: Load) -> Load:
        """A concurrency as an int, a rate rounded as its name writes it (so key and cell agree)."""
        if self.over == CONCURRENCY:
            return int(load)
        return float(f"{float(load):.{RATE_DIGITS}g}")

    def midpoint(self, lo: Load, hi: Load) -> Load | None:
        """The next load to bisect at, or None when lo and hi are as close as the search goes."""
        if self.over == CONCURRENCY:
            return (lo + hi) // 2 if hi - lo > 1 else None
        if hi - lo <= self.tolerance * hi:
            return None
        mid = self.normal((lo + hi) / 2.0)
        return mid if lo < mid < hi else None


def _check_beside(workload: Mapping[str, Any], over: str, where: str) -> None:
    """A search makes its own points: a sweep beside it, or a fixed rate when it searches the
    rate, would leave unsaid which load a probe runs."""
    for axis in AXES:
        if isinstance(workload.get(axis), list):
            raise ConfigError(
                f"config key '{where}.{axis}': a list (a sweep) beside a search; the search "
                "chooses the loads it probes (give one value, or drop the search)"
            )
    if over == REQUEST_RATE and workload.get(REQUEST_RATE) is not None:
        raise ConfigError(
            f"config key '{where}.{REQUEST_RATE}': a fixed rate beside a search over "
            "request_rate; the search sets each probe's rate"
        )


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"config key '{where}': {value!r} is not a finite number")
    return float(value)


def _load(value: Any, over: str, where: str) -> Load:
    if over == CONCURRENCY:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"config key '{where}': {value!r}; a concurrency is an integer >= 1")
        return value
    rate = _number(value, where)
    if rate <= 0.0:
        raise ConfigError(f"config key '{where}': {rate:g}; a request rate is above 0")
    rate = float(f"{rate:.{RATE_DIGITS}g}")
    label = point_part("", over, rate).removeprefix("-")
    if "e" in label:  # `:g` writes a rate below 1e-4 with an exponent, which no probe id reads
        raise ConfigError(
            f"config key '{where}': {value!r}; a probe at that rate would be named '{label}', "
            f"which does not read back as a rate: a searched rate is at least {MIN_RATE:g} "
            "requests/s"
        )
    return rate


def goal_of(name: str, workload: Mapping[str, Any]) -> tuple[Slo | None, SearchSpec | None]:
    """A workload's goal and search, checked together: a search needs a goal to decide by."""
    where = f"workloads.{name}"
    slo = Slo.from_config(workload["slo"], f"{where}.slo") if "slo" in workload else None
    spec = None
    if "search" in workload:
        spec = SearchSpec.from_config(workload["search"], f"{where}.search", workload)
        if slo is None:
            raise ConfigError(
                f"config key '{where}.search': a search needs a goal to decide by ({where}.slo)"
            )
    return slo, spec


class Action(StrEnum):
    PROBE = "probe"  # run a load for the first time
    EXTEND = "extend"  # run an unresolved load again with more prompts
    DONE = "done"


@dataclass(frozen=True)
class Step:
    """One measurement the search walked, with its verdict."""

    load: Load
    extension: int
    verdict: Verdict

    @property
    def key(self) -> ProbeKey:
        return (self.load, self.extension)


@dataclass(frozen=True)
class Plan:
    """What to do next. `probe`/`extend`: measure `key`. `done`: the answer, with every load
    that stayed unresolved at the cap, and each (pass, fail) pair of measured loads where the
    fail lies below the pass (the law is not monotone there: the answer is to read with care).
    `steps` are the measurements walked so far, in order."""

    action: Action
    steps: tuple[Step, ...]
    load: Load | None = None
    extension: int = 0
    largest_passing: Load | None = None
    smallest_failing: Load | None = None
    undecided: tuple[Load, ...] = ()
    non_monotone: tuple[tuple[Load, Load], ...] = ()

    @property
    def done(self) -> bool:
        return self.action == Action.DONE

    @property
    def key(self) -> ProbeKey | None:
        """The probe to measure next; None when done."""
        return None if self.done else (self.load, self.extension)

    @property
    def at_max(self) -> bool:
        """The largest load searched passed: the series serves at least that much. (No failing
        load is not enough: a load left unresolved at the cap stopped the search below it.)"""
        return (
            self.done
            and self.largest_passing is not None
            and self.smallest_failing is None
            and not self.undecided
        )


class _Missing(Exception):
    """Unwinds the walk at the first probe without a verdict."""

    def __init__(self, key: ProbeKey):
        self.key = key


def next_probe(spec: SearchSpec, verdicts: Mapping[ProbeKey, Verdict | str]) -> Plan:
    """The next probe of a search, or its answer, from the verdicts measured so far (keyed
    `(load, extension)`; keys the walk does not reach are ignored for the walk, and only read
    to flag a fail below a pass)."""
    steps: list[Step] = []
    final: dict[Load, Verdict] = {}

    def decide(load: Load) -> Verdict:
        for extension in range(spec.max_extensions + 1):
            found = verdicts.get((load, extension))
            if found is None:
                raise _Missing((load, extension))
            verdict = Verdict(found)
            steps.append(Step(load, extension, verdict))
            if verdict != Verdict.UNRESOLVED:
                break
        final[load] = verdict
        return verdict

    try:
        largest = _walk(spec, decide)
    except _Missing as missing:
        load, extension = missing.key
        action = Action.PROBE if extension == 0 else Action.EXTEND
        return Plan(action, tuple(steps), load, extension)
    fails = [load for load, v in final.items() if v == Verdict.FAIL]
    return Plan(
        Action.DONE,
        tuple(steps),
        largest_passing=largest,
        smallest_failing=min(fails) if fails else None,
        undecided=tuple(sorted(load for load, v in final.items() if v == Verdict.UNRESOLVED)),
        non_monotone=_non_monotone(final, verdicts),
    )


def _walk(spec: SearchSpec, decide: Callable[[Load], Verdict]) -> Load | None:
    """The largest load shown to pass (None: not even min): doubling until a load does not
    pass, then bisection between the largest pass and the smallest load not shown to pass."""
    largest: Load | None = None
    load = spec.normal(spec.min)
    while True:
        if decide(load) != Verdict.PASS:
            boundary = load
            break
        largest = load
        if load >= spec.max:
            return largest
        load = spec.clamp(load * 2)
    if largest is None:
        return None
    while (mid := spec.midpoint(largest, boundary)) is not None:
        if decide(mid) == Verdict.PASS:
            largest = mid
        else:
            boundary = mid
    return largest


def _non_monotone(
    walked: Mapping[Load, Verdict], verdicts: Mapping[ProbeKey, Verdict | str]
) -> tuple[tuple[Load, Load], ...]:
    """Each (pass, fail) with the fail at a lower load, over every load measured: the walk's
    own verdicts, and for a load it did not reach, that of its last extension given."""
    final = dict(walked)
    for load in {load for load, _ in verdicts} - set(walked):
        last = max(extension for other, extension in verdicts if other == load)
        final[load] = Verdict(verdicts[(load, last)])
    passes = sorted(load for load, v in final.items() if v == Verdict.PASS)
    fails = sorted(load for load, v in final.items() if v == Verdict.FAIL)
    return tuple((p, f) for p in passes for f in fails if f < p)
