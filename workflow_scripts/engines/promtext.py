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
