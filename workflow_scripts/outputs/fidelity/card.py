"""A card's "Fidelity" section: the cell against the cell it is compared with (greedy agreement,
the noise floor, the verdict, a GGUF quant's KL divergence, the fidelity goal), or, for a
reference cell, how often its own two runs agree. Built from the pair's files (the card rule's
inputs: the reference's and the floor's metrics.json, the quant's KL file) and judged as
fidelity.csv judges it (fidelity.judgement): a reference or floor run that did not finish gives
no verdict here either. A sweep point's verdict is its series' family's (fidelity.series), read
from the series' family file (outputs.fidelity.family)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...fidelity.agreement import CHANGED, NO_VERDICT, Agreement, PairVerdict, compare_outputs
from ...fidelity.goals import FidelityGoal
from ...fidelity.judgement import FLOOR_RUN, THIS_CELL, Run, judge_runs
from ...fidelity.kld_plan import kld_problem
from ...fidelity.series import SeriesVerdict
from ...verdicts.families import verdict_text
from ...vocabulary import Status
from .family import read_family, run_of
from .table import goal_judgement

if TYPE_CHECKING:
    from ..card.model import Section

NOT_RECORDED_NOTE = "Outputs were not recorded (`record_outputs: false`): nothing to compare."
DIFFERS_NOTE = "Its greedy outputs differ from its reference's beyond the noise floor."
CHANGED_NOTE = (  # a drafter's, in the card's notes
    "Its greedy outputs differ from its base's beyond the noise floor: the speed-up is not a "
    "free one (Fidelity, summary/fidelity.md)."
)


@dataclass(frozen=True)
class CardFidelity:
    """What the card shows: the pair's kind and reference cell ("" for a reference's own floor),
    the agreement (None: not compared), the floor, the verdict (None for a reference), a KL
    file's figures, the goal's verdict lines; `note`: why a reference's floor is not shown."""

    kind: str
    reference_cell: str
    agreement: Agreement | None
    floor: Agreement | None
    judged: PairVerdict | None
    kld: Mapping[str, Any] | None
    goal_lines: tuple[str, ...] = ()
    note: str = ""
    series: SeriesVerdict | None = None  # a sweep point's series, judged as a family

    @property
    def outputs_changed(self) -> bool:
        return self.judged is not None and self.judged.verdict == CHANGED


def card_fidelity(
    records: Sequence[Any],
    settings: Mapping[str, Any],
    reference: str | Path | None = None,
    floor: str | Path | None = None,
    kld: str | Path | None = None,
    metrics: Mapping[str, Any] | None = None,
    family: str | Path | None = None,
) -> CardFidelity | None:
    """The section's data: `settings` the card's `fidelity` param (`kind`, `reference_cell`,
    `goal`, a sweep point's own id as `point`), the paths the card rule's inputs name
    (metrics.json of the reference and of the floor run, the KL file, a sweep point's series'
    family file: outputs.fidelity.family); `metrics` the cell's own metrics.json (None:
    done)."""
    if not settings:
        return None
    mine = Run.of(metrics or {"status": Status.DONE}, records)
    reference_run, floor_run = run_of(reference), run_of(floor)
    if reference_run is None:  # a reference cell: its own floor
        for part, run in ((THIS_CELL, mine), (FLOOR_RUN, floor_run)):
            if run is not None and not run.finished:
                return CardFidelity("", "", None, None, None, None, note=run.why_not(part))
        own = compare_outputs(floor_run.records, mine.records) if floor_run else None
        return CardFidelity("", "", None, own, None, None)
    judgement = judge_runs(mine, reference_run, floor_run)
    kld_figures = json.loads(Path(kld).read_text()) if kld else None
    judged, series = PairVerdict(judgement.verdict, judgement.reason, judgement.p_value), None
    if family and judgement.verdict != NO_VERDICT:
        series = read_family(family)
        own = series.point(settings["point"])
        if own is not None:
            judged = PairVerdict(own.verdict, own.reason, own.alone.p_value)
    goal_lines: tuple[str, ...] = ()
    if settings.get("goal"):
        goal = FidelityGoal.from_dict(settings["goal"])
        verdict, detail = goal_judgement(goal, judgement.evidence, judgement.floor, kld_figures)
        goal_lines = (f"Fidelity goal ({goal.text}): {verdict}. {detail}",)
    return CardFidelity(
        settings["kind"],
        settings["reference_cell"],
        judgement.agreement,
        judgement.floor,
        judged,
        kld_figures,
        goal_lines,
        series=series,
    )


def _share(agreement: Agreement | None) -> str:
    if agreement is None or not agreement.recorded or not agreement.prompts_compared:
        return "—"
    lo, hi = agreement.interval_pct
    return (
        f"{agreement.identical_pct:.1f} % [{lo:.1f}, {hi:.1f}] "
        f"({agreement.identical}/{agreement.prompts_compared})"
    )


def _basis(agreement: Agreement | None) -> str:
    """What was compared: the same prompts, and how many were not paired (sent as other
    texts under one prompt and turn)."""
    if agreement is None or not agreement.unpaired:
        return "the same prompts"
    return f"the same prompts; {agreement.unpaired} not paired (sent as other texts)"


def _plus_minus(kld: Mapping[str, Any], key: str, digits: int) -> str:
    value, err = kld.get(key), kld.get(f"{key}_err")
    if value is None:
        return "—"
    return f"{value:.{digits}f}" + (f" ± {err:.{digits}f}" if err is not None else "")


def fidelity_section(data: CardFidelity) -> Section:
    """The card's "Fidelity" section."""
    from ..card.model import Section, fmt  # the card package (its build) imports this module

    if data.judged is None:  # a reference: how often its two runs agree
        if data.note:
            text = f"Other cells are compared with this one; no floor is shown: {data.note}."
        elif data.floor is None:
            text = "Compared with no other cell's outputs here; its floor was not measured."
        else:
            text = (
                "Other cells are compared with this one. Its noise floor, greedy outputs "
                f"identical across two runs of it: {_share(data.floor)}."
            )
        return Section("Fidelity", paragraphs=[text])
    if data.agreement is not None and not data.agreement.recorded:
        return Section("Fidelity", paragraphs=[NOT_RECORDED_NOTE])
    quartiles = data.agreement.first_divergence_quartiles if data.agreement else None
    rows = [
        ("Compared with", f"{data.reference_cell} ({data.kind})", _basis(data.agreement)),
        ("Identical greedy outputs", _share(data.agreement), "95 % Wilson interval"),
        (
            "Noise floor",
            _share(data.floor) if data.floor else "not measured",
            "the reference against its second run",
        ),
        (
            "First divergence (chars)",
            " / ".join(fmt(q, digits=0) for q in quartiles) if quartiles else "—",
            "quartiles over the outputs that differ",
        ),
        ("Verdict", data.judged.verdict, data.judged.reason),
    ]
    if data.series is not None:
        rows.append(
            (
                "Its series, pooled",
                verdict_text(data.series.verdict, data.series.p_value),
                "; ".join(
                    x for x in (data.series.family, data.series.reason, data.series.note) if x
                ),
            )
        )
    if data.kld and kld_problem(data.kld):
        rows.append(("KL divergence", kld_problem(data.kld), "llama-perplexity"))
    elif data.kld:
        rows += [
            ("KL divergence, mean", _plus_minus(data.kld, "kld_mean", 4), "nats, llama-perplexity"),
            ("KL divergence, p99", fmt(data.kld.get("kld_p99"), digits=4), "per token"),
            ("Same top token", _plus_minus(data.kld, "same_top_pct", 2) + " %", "per token"),
            ("Perplexity", _plus_minus(data.kld, "perplexity", 3), "on the fixed text"),
        ]
    header = ("Figure", "Value", "How")
    paragraphs = [DIFFERS_NOTE] if data.outputs_changed else []
    return Section("Fidelity", header, rows, paragraphs=[*paragraphs, *data.goal_lines])
