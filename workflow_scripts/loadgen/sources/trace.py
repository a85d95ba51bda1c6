"""An arrival trace replayed (the `trace` kind): its window's requests as prompts, each with
its planned send time and output length, filled with real text of ShareGPT or HumanEval (the
trace is read and cut in loadgen/traces.py, filled in loadgen/trace_text.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...registry_fetch import sha256_file
from ..prompts import Dataset, DatasetError, Prompt
from ..trace_text import TOKENS_PER_CHAR, trace_texts
from ..traces import TraceError, read_trace, window
from .base import packaged_file
from .humaneval import HUMANEVAL_MEMBER, HUMANEVAL_PACKAGE, humaneval_texts
from .registry import register
from .sharegpt import iter_json_array, sharegpt_file, sharegpt_first_human_turns


def trace_content(kind: str) -> list[str]:
    """The real text a trace's prompts are cut from: ShareGPT's first human turns that are
    plain ASCII (the measured characters-per-token holds for them), or what each HumanEval
    problem sends."""
    if kind == "sharegpt":
        text = sharegpt_file().read_text(encoding="utf-8", errors="replace")
        return [t for t in sharegpt_first_human_turns(iter_json_array(text)) if t.isascii()]
    return humaneval_texts(packaged_file(HUMANEVAL_PACKAGE, HUMANEVAL_MEMBER))


@register("trace")
def load_trace(spec: Mapping[str, Any], num_prompts: int) -> Dataset:
    """The first `num_prompts` requests of the trace's window as prompts, each with its planned
    send time (`at_s`) and output length (`max_tokens`), all checked before anything is
    sent."""
    path = Path(spec["path"])
    kind = spec.get("content", "sharegpt")
    try:
        requests = window(
            read_trace(path, spec["format"]),
            float(spec.get("start_s", 0.0)),
            spec.get("duration_s"),
            float(spec.get("time_scale", 1.0)),
            path,
        )
        if num_prompts > len(requests):
            raise TraceError(f"asked for {num_prompts} prompts, the window has {len(requests)}")
        chosen = requests[:num_prompts]
        replayed, note = trace_texts(chosen, trace_content(kind), TOKENS_PER_CHAR[kind], path)
    except TraceError as exc:
        raise DatasetError(f"trace: {exc}") from None
    prompts = [
        Prompt(i, r.text, at_s=r.at_s, max_tokens=r.output_length, trace=r.layout)
        for i, r in enumerate(replayed)
    ]
    note += f" ({kind}); max_tokens from each output_length, sent with ignore_eos"
    return Dataset(prompts, sha256_file(path), str(path), note)
