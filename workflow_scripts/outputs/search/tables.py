"""The latency-goal tables: `summary/slo.csv`/`.md`, one row per searched series (the largest
load that passes its goal, the smallest that fails, every probe with its verdict and bounds,
goodput and throughput at the answer, what the search cost), and the drafter at the goal
(`summary/slo_drafter.csv`/`.md`): each drafter series beside its base series under the same
goal. Rows are pure functions of each series' search outcome (`outcome`); `write_slo_tables`
puts them on disk."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ...atomic import write_text
from ...config.search import load_label
from ...process.machine_use import disturbed_names, disturbed_note
from ...slo.point import PointResult
from ...slo.search import ProbeKey, SearchSettings, Step
from ...verdicts.bounds import CONFIDENCE
from ...vocabulary import IDENTITY_COLUMNS, NO_DRAFTER, RANDOM_TOKENS, identity_columns
from ..energy.goal import (
    DRAFTER_GOAL_ENERGY_COLUMNS,
    SLO_ENERGY_COLUMNS,
    answer_columns,
    drafter_goal_columns,
)
from ..spec_gain import RANDOM_TOKENS_FLAG
from ..writers import to_markdown, write_table
from .outcome import SearchOutcome
from .text import attainment_text, objective_text

SLO_CSV_COLUMNS = [
    "series",
    "largest_passing",
    "smallest_failing",
    "over",
    "complete",
    "slo",
    "search",
    "note",
    "probes",
    "goodput_req_s",
    "goodput_decode_tok_s",
    "attainment",
    "req_per_s",
    "decode_tok_s",
    "num_probes",
    "probes_wall_s",
    "undecided",
    "non_monotone",
    *IDENTITY_COLUMNS,
    "latency_from",  # where TTFT and E2E ran from: schedule (open-loop arrivals) | send
    "rests_on_disturbed",  # the walked probes other work disturbed: the answer rests on them
    # what a token costs at the largest passing load (its probe's energy; dollars where priced)
    *SLO_ENERGY_COLUMNS,
]
SLO_MD_COLUMNS = [
    "series",
    "largest_passing",
    "smallest_failing",
    "goodput_req_s",
    "goodput_decode_tok_s",
    "decode_tok_s",
    "num_probes",
    "probes_wall_s",
    "note",
    "latency_from",
    "probes",
]

DRAFTER_GOAL_COLUMNS = [
    "drafter_series",
    "base_series",
    *IDENTITY_COLUMNS,
    "over",
    "slo",
    "base_largest_passing",
    "drafter_largest_passing",
    "load_change_pct",
    "base_decode_tok_s",
    "drafter_decode_tok_s",
    "decode_change_pct",
    "base_goodput_decode_tok_s",
    "drafter_goodput_decode_tok_s",
    "change",
    "flags",
    "disturbed",  # a probe either search's answer rests on was disturbed (flags says which)
    # each at the load it serves within the goal: J per output token and the drafter's change
    *DRAFTER_GOAL_ENERGY_COLUMNS,
]


def probe_text(spec: SearchSettings, step: Step, result: PointResult | None) -> str:
    """`c8 n=64 pass (tpot p90 38.0 hi 41.2 ≤ 52 ms)`: a probe, its requests, its verdict and
    the parts that gave it (every part of a pass; the failing or straddling ones otherwise)."""
    name = step_label(spec, step.key)
    if result is None:
        return f"{name} {step.verdict}"
    parts = [objective_text(o) for o in result.objectives if o.verdict == result.verdict]
    attainment = result.attainment
    if attainment.verdict is not None and attainment.verdict == result.verdict:
        parts.append(attainment_text(attainment))
    if result.errors or result.incomplete:
        parts.append(f"{result.errors} errors, {result.incomplete} incomplete not counted")
    return f"{name} n={result.completed} {result.verdict} ({', '.join(parts)})"


def load_text(spec: SearchSettings, load: Any, at_max: bool = False) -> str:
    """`c=8`, `r=2.5/s`; `at least c=64` where the search's max passed; `no passing load`."""
    if load is None:
        return "no passing load"
    shown = f"{spec.letter}={load:g}" + ("/s" if spec.letter == "r" else "")
    return f"at least {shown}" if at_max else shown


def search_note(search: SearchOutcome) -> str:
    """What the search concluded, in a sentence or two."""
    plan, spec = search.plan, search.settings
    if not plan.done:
        label = load_label(spec, plan.load) + (f" ext{plan.extension}" if plan.extension else "")
        if plan.key in search.failed:
            reason = (search.failed[plan.key].splitlines() or ["no reason recorded"])[0]
            return f"failed at {label}: {reason} (retried next run)"
        return f"searching: next {label}"
    notes = []
    if plan.at_max:
        notes.append(
            f"{load_label(spec, plan.largest_passing)} (the search's max) passes: the series "
            "serves at least that within the goal"
        )
    elif plan.largest_passing is None:
        below = plan.steps[-1] if plan.steps else None
        notes.append(
            "no load passes"
            + (f": {load_label(spec, below.load)} is {below.verdict}" if below else "")
        )
    else:
        failing = plan.smallest_failing
        notes.append(
            f"largest passing {load_label(spec, plan.largest_passing)}"
            + (f", smallest failing {load_label(spec, failing)}" if failing is not None else "")
        )
    if plan.undecided:
        prompts = f"{spec.extension_factor**spec.max_extensions:g}×"
        loads = ", ".join(load_label(spec, load) for load in plan.undecided)
        notes.append(
            f"{loads} unresolved after {spec.max_extensions} extensions ({prompts} prompts): "
            "not shown to pass, so the search stayed below"
        )
    if plan.non_monotone:
        pairs = ", ".join(
            f"{load_label(spec, fail)} fails below {load_label(spec, ok)} passing"
            for ok, fail in plan.non_monotone
        )
        notes.append(f"not monotone ({pairs}): read the answer with care")
    return "; ".join(notes)


def latency_from_text(search: SearchOutcome) -> str:
    """Where the series' probes counted TTFT and E2E from (`slo.point`): `schedule` (open-loop
    arrivals: each request's scheduled time), `send`, both where its probes differ, '' with
    no probe measured."""
    return ", ".join(sorted({r.latency_from for r in search.results.values()}))


def step_label(spec: SearchSettings, key: ProbeKey) -> str:
    """`c8`, `c8 ext1`: a probe as the tables name it."""
    return load_label(spec, key[0]) + (f" ext{key[1]}" if key[1] else "")


def disturbed_probes(search: SearchOutcome) -> list[str]:
    """The probes the search's walk rests on that other work on the machine disturbed (every
    walked probe shapes the answer), in walk order."""
    return [
        step_label(search.settings, step.key)
        for step in search.plan.steps
        if step.key in search.disturbed
    ]


def slo_row(search: SearchOutcome, price: Mapping[str, float] | None = None) -> dict[str, Any]:
    """One series' row of slo.csv: a walked probe that was disturbed is named in the note and
    in `rests_on_disturbed`, as spec_crossover names its points; what a token costs at the
    answer (`price`: the series', config `cost`)."""
    plan, spec = search.plan, search.settings
    shaky = disturbed_probes(search)
    answer = search.at(plan.largest_passing) if plan.largest_passing is not None else None
    walls = [search.results[s.key].wall_s for s in plan.steps if s.key in search.results]
    return {
        "series": search.series,
        "largest_passing": plan.largest_passing,
        "smallest_failing": plan.smallest_failing,
        "over": spec.over,
        "complete": plan.done,
        "slo": search.slo.text,
        "search": spec.text,
        "note": search_note(search) + disturbed_note(shaky),
        "probes": "; ".join(
            probe_text(spec, step, search.results.get(step.key)) for step in plan.steps
        ),
        "goodput_req_s": answer.goodput_req_s if answer else None,
        "goodput_decode_tok_s": answer.goodput_decode_tok_s if answer else None,
        "attainment": answer.attainment.fraction if answer else None,
        "req_per_s": answer.req_per_s if answer else None,
        "decode_tok_s": answer.decode_tok_s if answer else None,
        "num_probes": len(plan.steps),
        "probes_wall_s": sum(w for w in walls if w is not None) if walls else None,
        "undecided": ", ".join(load_label(spec, load) for load in plan.undecided),
        "non_monotone": ", ".join(
            f"{load_label(spec, fail)}<{load_label(spec, ok)}" for ok, fail in plan.non_monotone
        ),
        **identity_columns(search),
        "latency_from": latency_from_text(search),
        "rests_on_disturbed": ", ".join(shaky),
        **answer_columns(
            search.energy_at(plan.largest_passing),
            answer.decode_tok_s if answer else None,
            price,
            answer is not None,
        ),
    }


def slo_rows(
    searches: Sequence[SearchOutcome], prices: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    prices = prices or {}
    return [slo_row(search, prices.get(search.series)) for search in searches]


def _change_pct(new: float | None, base: float | None) -> float | None:
    if new is None or base is None or base == 0:
        return None
    return 100.0 * (new - base) / base


def change_text(base: SearchOutcome, drafter: SearchOutcome) -> str:
    """`the drafter raises the load served within the goal from c=8 to c=12`."""
    if not (base.plan.done and drafter.plan.done):
        return "a search of the pair has not finished"
    spec = base.settings
    b, d = base.plan.largest_passing, drafter.plan.largest_passing
    b_text = load_text(spec, b, base.plan.at_max)
    d_text = load_text(drafter.settings, d, drafter.plan.at_max)
    if b == d and base.plan.at_max == drafter.plan.at_max:
        return f"the drafter leaves the load served within the goal at {b_text}"
    rank_b = (-1.0 if b is None else b, base.plan.at_max)
    rank_d = (-1.0 if d is None else d, drafter.plan.at_max)
    verb = "raises" if rank_d > rank_b else "lowers"
    return f"the drafter {verb} the load served within the goal from {b_text} to {d_text}"


def _disturbed_pair(base: SearchOutcome | None, drafter: SearchOutcome) -> str:
    """`disturbed: base series at c8 and drafter series at c4`: the disturbed probes each
    search's answer rests on (spec_gain's flag, by series), else ''."""
    names = []
    for name, search in (("base series", base), ("drafter series", drafter)):
        labels = disturbed_probes(search) if search is not None else []
        if labels:
            names.append(f"{name} at {', '.join(labels)}")
    return disturbed_names(names)


def drafter_goal_rows(searches: Sequence[SearchOutcome]) -> list[dict[str, Any]]:
    """Each drafter series beside its base series (drafter `none`, same model, engine, quant and
    workload): the largest passing load with and without the drafter, throughput at each, and
    the change. A base under another goal or searched over another axis is no base: flagged."""
    bases: dict[tuple[str, ...], list[SearchOutcome]] = {}
    for s in searches:
        if s.drafter == NO_DRAFTER:
            bases.setdefault((s.model, s.engine, s.quant, s.workload), []).append(s)
    rows = []
    for d in searches:
        if d.drafter == NO_DRAFTER:
            continue
        candidates = bases.get((d.model, d.engine, d.quant, d.workload), [])
        base = next(
            (b for b in candidates if b.slo == d.slo and b.settings.over == d.settings.over), None
        )
        flags = []
        if base is None:
            flags.append(
                "base series under another goal or axis" if candidates else "no base series"
            )
        if d.content == RANDOM_TOKENS:
            flags.append(RANDOM_TOKENS_FLAG)
        if shaky := _disturbed_pair(base, d):
            flags.append(shaky)
        b_answer = base.at(base.plan.largest_passing) if base else None
        d_answer = d.at(d.plan.largest_passing)
        b_decode = b_answer.decode_tok_s if b_answer else None
        d_decode = d_answer.decode_tok_s if d_answer else None
        rows.append(
            {
                "drafter_series": d.series,
                "base_series": base.series if base else None,
                **identity_columns(d),
                "over": d.settings.over,
                "slo": d.slo.text,
                "base_largest_passing": base.plan.largest_passing if base else None,
                "drafter_largest_passing": d.plan.largest_passing,
                "load_change_pct": _change_pct(
                    d.plan.largest_passing, base.plan.largest_passing if base else None
                ),
                "base_decode_tok_s": b_decode,
                "drafter_decode_tok_s": d_decode,
                "decode_change_pct": _change_pct(d_decode, b_decode),
                "base_goodput_decode_tok_s": b_answer.goodput_decode_tok_s if b_answer else None,
                "drafter_goodput_decode_tok_s": d_answer.goodput_decode_tok_s if d_answer else None,
                "change": change_text(base, d) if base else "",
                "flags": "; ".join(flags),
                "disturbed": bool(shaky),
                **drafter_goal_columns(
                    base.energy_at(base.plan.largest_passing) or {} if b_answer else None,
                    d.energy_at(d.plan.largest_passing) or {} if d_answer else None,
                ),
            }
        )
    return rows


SLO_INTRO = (
    "One row per searched series: the largest load that passes the goal and the smallest that "
    "fails (slo.csv has every column). A probe passes when the {conf} % distribution-free bound "
    "on each objective's percentile (order statistics; no assumption on the latency "
    "distribution) is within its limit, fails when the bound is outside it, and is unresolved "
    "when it straddles the limit or there are too few requests for a bound (a p99 from 16 "
    "requests bounds nothing from above); an unresolved probe is run again with more prompts. "
    "Each probe lists its completed requests (n), the measured percentile and the bound that "
    "decided (`hi` the upper, `lo` the lower), in ms. Attainment: the fraction of completed "
    "requests meeting every objective, with its exact (Clopper-Pearson) interval; a request of "
    "one token has no TPOT and meets a TPOT objective. Goodput: the requests (and their "
    "completion tokens) that met every objective, per second of the run, at the largest "
    "passing load. `latency_from`: where TTFT and E2E ran from — `schedule` under open-loop "
    "arrivals (a trace, Poisson `request_rate`): from each request's scheduled time, so a "
    "request that waited for a free slot is charged its wait (left out, it is what the field "
    "calls coordinated omission); `send` in a closed loop. TPOT runs between tokens either way."
    "passing load. A probe measured while other work used the machine (crossing the config's "
    "`checks`) is named in the note (`rests on a disturbed measurement`) and in "
    "`rests_on_disturbed`: every probe the walk took shapes the answer."
)
SLO_ENERGY_MD_COLUMNS = ["j_per_output_token", "usd_per_m_output_tokens", "cost_basis"]
SLO_ENERGY_INTRO = (
    "j_per_output_token: what a token cost in energy at the largest passing load (the joules "
    "the devices drew over that probe's bench window, its idle draw included, ÷ its output "
    "tokens; energy_note says what they cover), and usd_per_m_output_tokens its dollars per "
    "million output tokens where the config gives a price, on the basis cost_basis names."
)
DRAFTER_GOAL_INTRO = (
    "Each drafter series beside its base series (drafter none, same model, engine, quant and "
    "workload) under the same goal: the largest load each serves within it, and the decode "
    "throughput there. Flags `disturbed: base series at c8`: a probe that search's answer "
    "rests on was measured while other work used the machine. Where energy was measured, each "
    "one's J per output token at its answer and the drafter's change there, with its interval "
    "and verdict (`saves`, `costs more`: docs/statistics.md)."
)


def slo_frame(
    searches: Sequence[SearchOutcome], prices: Mapping[str, Any] | None = None
) -> pd.DataFrame:
    return pd.DataFrame(slo_rows(searches, prices), columns=SLO_CSV_COLUMNS)


def drafter_goal_frame(searches: Sequence[SearchOutcome]) -> pd.DataFrame:
    return pd.DataFrame(drafter_goal_rows(searches), columns=DRAFTER_GOAL_COLUMNS)


def slo_md_columns(slo: pd.DataFrame) -> list[str]:
    """slo.md's columns: the energy and dollar figures at the answer only where some series
    has them."""
    extra = [c for c in SLO_ENERGY_MD_COLUMNS if slo[c].notna().any()]
    at = SLO_MD_COLUMNS.index("num_probes")
    return SLO_MD_COLUMNS[:at] + extra + SLO_MD_COLUMNS[at:]


def write_slo_tables(
    searches: Sequence[SearchOutcome],
    out: Mapping[str, str | Path],
    prices: Mapping[str, Any] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """slo.{csv,md} and slo_drafter.{csv,md} to the paths `out` names (`slo_csv`, `slo_md`,
    `slo_drafter_csv`, `slo_drafter_md`); the markdown shows the columns a reader compares;
    `prices` each series' price (config `cost`), for the dollars at the answer."""
    slo, drafter = slo_frame(searches, prices), drafter_goal_frame(searches)
    intro = SLO_INTRO.format(conf=f"{100 * CONFIDENCE:g}")
    if slo["j_per_output_token"].notna().any():
        intro += " " + SLO_ENERGY_INTRO
    write_text(out["slo_csv"], slo.to_csv(index=False))
    write_text(
        out["slo_md"],
        to_markdown(slo[slo_md_columns(slo)], "Latency goal: largest load served", intro),
    )
    write_table(
        drafter,
        out["slo_drafter_csv"],
        out["slo_drafter_md"],
        "Latency goal: the drafter at the goal",
        DRAFTER_GOAL_INTRO,
    )
    return slo, drafter
