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

from ..verdicts.verdict import Verdict
from ..vocabulary import point_value

Load = int | float
ProbeKey = tuple[Load, int]  # (load, extension)

CONCURRENCY, REQUEST_RATE = "concurrency", "request_rate"  # config.sweeps.AXES
RATE_DIGITS = 6  # a rate probe's load, rounded as `point_part` writes it (`:g`): key = name


def normal_load(over: str, load: Load) -> Load:
    """A concurrency as an int, a rate rounded as its name writes it (so key and cell agree)."""
    value = point_value(over, load)
    return value if over == CONCURRENCY else float(f"{value:.{RATE_DIGITS}g}")


@dataclass(frozen=True)
class SearchSettings:
    """Where a series' search looks and how hard it tries on an unresolved point (the schema
    states each field's range and default: `$defs.search`)."""

    over: str  # concurrency | request_rate
    min: Load
    max: Load
    tolerance: float | None  # request_rate: stop when (hi - lo) <= tolerance * hi
    max_extensions: int
    extension_factor: float

    @property
    def letter(self) -> str:
        """`c` or `r`, as a point's name has it."""
        return "c" if self.over == CONCURRENCY else "r"

    def prompts_for(self, num_prompts: int, extension: int) -> int:
        """The prompts of extension k of a probe whose first run has `num_prompts`."""
        return max(num_prompts, math.ceil(num_prompts * self.extension_factor**extension))

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
    def from_dict(cls, data: Mapping[str, Any]) -> SearchSettings:
        """A search as the config states it (checked by its schema, defaults filled in) or as
        `to_dict` wrote it (the project's own search file): loads normal, numbers as floats."""
        over, tolerance = data["over"], data.get("tolerance")
        return cls(
            over,
            normal_load(over, data["min"]),
            normal_load(over, data["max"]),
            None if tolerance is None else float(tolerance),
            data["max_extensions"],
            float(data["extension_factor"]),
        )

    def clamp(self, load: Load) -> Load:
        return min(self.normal(load), self.max)

    def normal(self, load: Load) -> Load:
        return normal_load(self.over, load)

    def midpoint(self, lo: Load, hi: Load) -> Load | None:
        """The next load to bisect at, or None when lo and hi are as close as the search goes."""
        if self.over == CONCURRENCY:
            return (lo + hi) // 2 if hi - lo > 1 else None
        if hi - lo <= self.tolerance * hi:
            return None
        mid = self.normal((lo + hi) / 2.0)
        return mid if lo < mid < hi else None


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


def next_probe(spec: SearchSettings, verdicts: Mapping[ProbeKey, Verdict | str]) -> Plan:
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


def _walk(spec: SearchSettings, decide: Callable[[Load], Verdict]) -> Load | None:
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
