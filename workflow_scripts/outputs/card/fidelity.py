"""A card's "Fidelity" section: the cell against the cell it is compared with (greedy agreement,
the noise floor, the verdict, a GGUF quant's KL divergence, the fidelity goal), or, for a
reference cell, how often its own two runs agree. Built from the pair's files (the card rule's
inputs: the reference's and the floor's metrics.json, the quant's KL file); a sweep point's
verdict is its series' family's (fidelity.series), from the same files of the other points."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...families import verdict_text
from ...fidelity.agreement import CHANGED, Agreement, PairVerdict, compare_outputs, judge_pair
from ...fidelity.goals import FidelityGoal
from ...fidelity.series import SeriesPoint, SeriesVerdict, judge_series
from ...loadgen.records import read_records
from ...vocabulary import Status
from ..fidelity_tables import goal_judgement
from ..record_index import files_of
from .model import Section, fmt

NOT_RECORDED_NOTE = "Outputs were not recorded (`record_outputs: false`): nothing to compare."
DIFFERS_NOTE = "Its greedy outputs differ from its reference's beyond the noise floor."
CHANGED_NOTE = (  # a drafter's, in the card's notes
    "Its greedy outputs differ from its base's beyond the noise floor: the speed-up is not a "
    "free one (Fidelity, summary/fidelity.md)."
)


@dataclass(frozen=True)
class CardFidelity:
    """What the card shows: the pair's kind and reference cell ("" for a reference's own floor),
    the agreement, the floor, the verdict, a KL file's figures, the goal's verdict lines."""

    kind: str
    reference_cell: str
    agreement: Agreement | None
    floor: Agreement | None
    judged: PairVerdict | None
    kld: Mapping[str, Any] | None
    goal_lines: tuple[str, ...] = ()
    series: SeriesVerdict | None = None  # a sweep point's series, judged as a family

    @property
    def outputs_changed(self) -> bool:
        return self.judged is not None and self.judged.verdict == CHANGED


def _records(metrics_path: str | Path | None) -> list[dict[str, Any]] | None:
    if not metrics_path:
        return None
    requests = Path(files_of(metrics_path).requests)
    return [r.to_dict() for r in read_records(requests)] if requests.exists() else []


def _done(metrics_path: str | Path | None) -> bool:
    """Whether the cell finished (a missing or damaged metrics.json: no)."""
    try:
        return json.loads(Path(metrics_path).read_text()).get("status") == Status.DONE
    except (OSError, TypeError, ValueError, AttributeError):
        return False


def family_verdict(
    members: Sequence[Mapping[str, Any]],
    paths: Mapping[str, str],
    own: tuple[Agreement, Agreement | None],
) -> SeriesVerdict:
    """A sweep point's series judged as a family, from the card param's `family` (each point's
    cell, name and input, the card's own marked) and those inputs' files; like fidelity.csv,
    only the points that finished."""
    points = []
    for member in members:
        agreement, floor = own
        if not member.get("own"):
            key = member["input"]
            mine, theirs = paths.get(key), paths.get(f"{key}_reference")
            if not (_done(mine) and _done(theirs)):
                continue
            ref_records, floor_records = _records(theirs), _records(paths.get(f"{key}_floor"))
            agreement = compare_outputs(_records(mine), ref_records)
            floor = compare_outputs(floor_records, ref_records) if floor_records else None
        points.append(SeriesPoint(member["cell"], member["label"], agreement, floor))
    return judge_series(points)


def card_fidelity(
    records: Sequence[Any],
    settings: Mapping[str, Any],
    reference: str | Path | None = None,
    floor: str | Path | None = None,
    kld: str | Path | None = None,
    family: Mapping[str, str] | None = None,
) -> CardFidelity | None:
    """The section's data: `settings` the card's `fidelity` param (`kind`, `reference_cell`,
    `goal`, a sweep point's `family`), the paths the card rule's inputs name (metrics.json of
    the reference and of the floor run, the KL file, the family's other points' files)."""
    if not settings:
        return None
    mine = [r if isinstance(r, Mapping) else r.to_dict() for r in records]
    ref_records, floor_records = _records(reference), _records(floor)
    if ref_records is None:  # a reference cell: its own floor
        own = compare_outputs(floor_records, mine) if floor_records is not None else None
        return CardFidelity("", "", None, own, None, None)
    agreement = compare_outputs(mine, ref_records)
    floor_agreement = compare_outputs(floor_records, ref_records) if floor_records else None
    kld_figures = json.loads(Path(kld).read_text()) if kld else None
    judged, series = judge_pair(agreement, floor_agreement), None
    if settings.get("family"):
        series = family_verdict(settings["family"], family or {}, (agreement, floor_agreement))
        own = series.point(next(m["cell"] for m in settings["family"] if m.get("own")))
        judged = PairVerdict(own.verdict, own.reason, own.alone.p_value)
    goal_lines: tuple[str, ...] = ()
    if settings.get("goal"):
        goal = FidelityGoal.from_dict(settings["goal"])
        verdict, detail = goal_judgement(goal, agreement, floor_agreement, kld_figures)
        goal_lines = (f"Fidelity goal ({goal.text}): {verdict}. {detail}",)
    return CardFidelity(
        settings["kind"],
        settings["reference_cell"],
        agreement,
        floor_agreement,
        judged,
        kld_figures,
        goal_lines,
        series,
    )


def _share(agreement: Agreement | None) -> str:
    if agreement is None or not agreement.recorded or not agreement.prompts_compared:
        return "—"
    lo, hi = agreement.interval_pct
    return (
        f"{agreement.identical_pct:.1f} % [{lo:.1f}, {hi:.1f}] "
        f"({agreement.identical}/{agreement.prompts_compared})"
    )


def _plus_minus(kld: Mapping[str, Any], key: str, digits: int) -> str:
    value, err = kld.get(key), kld.get(f"{key}_err")
    if value is None:
        return "—"
    return f"{value:.{digits}f}" + (f" ± {err:.{digits}f}" if err is not None else "")


def fidelity_section(data: CardFidelity) -> Section:
    """The card's "Fidelity" section."""
    if data.agreement is None:  # a reference: how often its two runs agree
        if data.floor is None:
            text = "Compared with no other cell's outputs here; its floor was not measured."
        else:
            text = (
                "Other cells are compared with this one. Its noise floor, greedy outputs "
                f"identical across two runs of it: {_share(data.floor)}."
            )
        return Section("Fidelity", paragraphs=[text])
    if not data.agreement.recorded:
        return Section("Fidelity", paragraphs=[NOT_RECORDED_NOTE])
    quartiles = data.agreement.first_divergence_quartiles
    rows = [
        ("Compared with", f"{data.reference_cell} ({data.kind})", "the same prompts"),
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
    if data.kld:
        rows += [
            ("KL divergence, mean", _plus_minus(data.kld, "kld_mean", 4), "nats, llama-perplexity"),
            ("KL divergence, p99", fmt(data.kld.get("kld_p99"), digits=4), "per token"),
            ("Same top token", _plus_minus(data.kld, "same_top_pct", 2) + " %", "per token"),
            ("Perplexity", _plus_minus(data.kld, "perplexity", 3), "on the fixed text"),
        ]
    header = ("Figure", "Value", "How")
    paragraphs = [DIFFERS_NOTE] if data.outputs_changed else []
    return Section("Fidelity", header, rows, paragraphs=[*paragraphs, *data.goal_lines])
