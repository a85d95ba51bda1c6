"""Prometheus text exposition -> {metric: {labels: value}}, via prometheus_client's parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def counters(text: str, prefix: str = "") -> dict[str, dict[tuple, float]]:
    """Samples whose name starts with `prefix`, keyed by the name without it and sorted labels.

    Counter samples keep their `_total` suffix, so names match what the engine prints.
    """
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith(prefix) or sample.name.endswith("_created"):
                continue
            name = sample.name[len(prefix) :]
            out.setdefault(name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def counter_delta(before: str | None, after: str | None, prefix: str, name: str) -> float | None:
    """How much counter `name` (summed over its labels: engines, model names, sources) grew
    between two readings; None when the later one has no such counter. A counter absent from
    the earlier reading (created at its first increment) counts from 0."""

    def total(text: str | None) -> float | None:
        samples = counters(text, prefix).get(name) if text else None
        return sum(samples.values()) if samples else None

    after_total = total(after)
    if after_total is None:
        return None
    return after_total - (total(before) or 0.0)
