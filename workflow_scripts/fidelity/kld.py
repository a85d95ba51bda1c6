"""Distribution fidelity of GGUF quants, run: `llama-perplexity` of the pinned llama.cpp build,
once with `--kl-divergence-base` on a model's reference quant (its logits, one cached target per
model), then with `--kl-divergence` per quant against those logits, all on one fixed real text.
Which steps a matrix has and each step's settings are `kld_plan`'s (parse time).

- The text (`fidelity_text`): ShareGPT V3 conversations, every turn (human and gpt) in file
  order, cut to a fixed number of characters: the same bytes for every quant of every model.
- The tool's output is read by `perplexity_output` (its own module: what the tool prints).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..atomic import write_json
from ..cell.failures import write_failed_stamp
from ..engines.build_llamacpp import perplexity_of
from ..engines.cpu_isa import native_isa
from ..text import first_line
from ..vocabulary import Status
from ..weights.derive import llama_cpp_source
from .kld_plan import KldSettings, KldStep, failure_key
from .perplexity_output import (
    BaseFigures,
    KldFigures,
    PerplexityError,
    parse_base,
    parse_kld,
)

PERPLEXITY_TIMEOUT_S = 3600.0


# --- the text -------------------------------------------------------------------------------


def conversation_text(items: Any, chars: int) -> str:
    """Every non-empty turn of each conversation (human and gpt), in order, a blank line
    between turns, cut to `chars` characters; PerplexityError when the items hold fewer."""
    parts: list[str] = []
    total = 0
    for item in items:
        turns = item.get("conversations") if isinstance(item, dict) else None
        for turn in turns or []:
            text = (turn.get("value") or "").strip() if isinstance(turn, dict) else ""
            if text:
                total += len(text) + (2 if parts else 0)
                parts.append(text)
        if total >= chars:
            return "\n\n".join(parts)[:chars]
    raise PerplexityError(f"the conversations hold {total} characters, {chars} are needed")


def fidelity_text(settings: KldSettings) -> str:
    """The fixed text: the dataset's conversations from the start of its file."""
    from ..loadgen.sources.sharegpt import iter_json_array, sharegpt_file

    path = sharegpt_file(settings.dataset)
    return conversation_text(
        iter_json_array(path.read_text(encoding="utf-8", errors="replace")),
        settings.text_chars,
    )


def sha256_bytes(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --- running the tool -----------------------------------------------------------------------


def base_argv(tool: str, gguf: str, text: str, logits: str, settings: KldSettings) -> list[str]:
    """The reference's run: its logits over the text's first `chunks` x `ctx` tokens."""
    argv = [tool, "-m", gguf, "-f", text, "-c", str(settings.ctx)]
    argv += ["--chunks", str(settings.chunks), "--kl-divergence-base", logits]
    return argv + _threads(settings)


def kld_argv(tool: str, gguf: str, logits: str, settings: KldSettings) -> list[str]:
    """A quant's run against the reference's logits (which hold the tokens and the chunks)."""
    argv = [tool, "-m", gguf, "-c", str(settings.ctx), "--kl-divergence-base", logits]
    return argv + ["--kl-divergence", *_threads(settings)]


def _threads(settings: KldSettings) -> list[str]:
    return ["-t", str(settings.threads)] if settings.threads else []


def run_tool(argv: list[str]) -> tuple[str, float]:
    """Run llama-perplexity; its whole output goes to stderr (the rule's log). Its output and
    wall time, or PerplexityError with the last lines."""
    print(f"$ {' '.join(argv)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=PERPLEXITY_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise PerplexityError(
            f"llama-perplexity did not end in {PERPLEXITY_TIMEOUT_S:.0f} s"
        ) from exc
    wall_s = round(time.monotonic() - started, 2)
    sys.stderr.write(proc.stdout)
    sys.stderr.flush()
    if proc.returncode != 0:
        last = " | ".join(line for line in proc.stdout.splitlines()[-5:] if line.strip())
        raise PerplexityError(f"llama-perplexity exited {proc.returncode}: {last}")
    return proc.stdout, wall_s


def check_chunks(figures: BaseFigures | KldFigures, settings: KldSettings) -> None:
    """The tool made the chunks asked for: it quietly makes fewer from a text too short."""
    if (figures.chunks, figures.ctx) != (settings.chunks, settings.ctx):
        raise PerplexityError(
            f"llama-perplexity evaluated {figures.chunks} chunks of {figures.ctx} tokens, "
            f"{settings.chunks} of {settings.ctx} were asked for (a text too short for this "
            "model's tokenizer?)"
        )


# --- the steps ------------------------------------------------------------------------------


def _read_ok(path: str | Path, what: str) -> dict[str, Any]:
    """A stamp, manifest or record, refused with its reason when its step failed."""
    data = json.loads(Path(path).read_text())
    if data.get("status") == Status.FAILED:
        raise PerplexityError(f"{what} failed: {first_line(data.get('reason'))}")
    return data


def tool_of(step: KldStep, stamp_path: str | Path) -> tuple[str, dict[str, Any]]:
    """llama-perplexity of the engine's build, and what names that build in a record."""
    stamp = _read_ok(stamp_path, f"engine '{step.engine}'")
    tool, build = perplexity_of(stamp, step.build, native_isa)
    named = {
        "engine": step.engine,
        "build_key": build["key"],
        "source": llama_cpp_source(build),
        "server_version": stamp.get("version"),
    }
    return tool, named


def gguf_of(manifest_path: str | Path, key: str) -> str:
    primary = str(_read_ok(manifest_path, f"weights {key}")["primary"])
    if not primary.endswith(".gguf"):
        raise PerplexityError(f"weights {key} are no GGUF ({primary})")
    return primary


def measure_base(
    step: KldStep, text: str, stamp: str, manifest: str, logits: str, record: str
) -> dict[str, Any]:
    """The reference's logits over the text (written whole, then renamed into place) and its
    record: perplexity, chunks, the text's sha256, the command, its wall time, the build."""
    tool, build = tool_of(step, stamp)
    gguf = gguf_of(manifest, f"{step.model}__{step.quant}")
    partial = f"{logits}.partial"
    argv = base_argv(tool, gguf, text, partial, step.settings)
    output, wall_s = run_tool(argv)
    figures = parse_base(output)
    check_chunks(figures, step.settings)
    os.replace(partial, logits)
    data = {
        **step.identity,
        "status": Status.DONE,
        **_text_facts(text, figures),
        "perplexity": figures.perplexity,
        "perplexity_err": figures.perplexity_err,
        "logits_bytes": Path(logits).stat().st_size,
        **_run_facts(argv, wall_s, step, build),
    }
    write_json(record, data)
    return data


def measure_kld(
    step: KldStep, text: str, base: str, logits: str, stamp: str, manifest: str, record: str
) -> dict[str, Any]:
    """A quant's KL divergence against the reference's logits, and its record."""
    base_record = _read_ok(base, f"the logits of the reference {step.reference_quant}")
    if base_record["text_sha256"] != sha256_bytes(text):
        raise PerplexityError(f"the reference's logits ({base}) were made from another text")
    tool, build = tool_of(step, stamp)
    gguf = gguf_of(manifest, f"{step.model}__{step.quant}")
    argv = kld_argv(tool, gguf, logits, step.settings)
    output, wall_s = run_tool(argv)
    figures = parse_kld(output)
    check_chunks(figures, step.settings)
    data = {
        **step.identity,
        "status": Status.DONE,
        **_text_facts(text, figures),
        **figures.to_dict(),
        "base_wall_s": base_record["wall_s"],
        **_run_facts(argv, wall_s, step, build),
    }
    write_json(record, data)
    return data


def _text_facts(text: str, figures: BaseFigures | KldFigures) -> dict[str, Any]:
    """The text as the tool read it: its sha256, and the tokens it evaluated (`chunks` x
    `ctx`; the tool scores the second half of each chunk, `scored_tokens`)."""
    return {
        "text_sha256": sha256_bytes(text),
        "text_tokens": figures.chunks * figures.ctx,
        "scored_tokens": figures.chunks * (figures.ctx - 1 - figures.ctx // 2),
        "ctx": figures.ctx,
        "chunks": figures.chunks,
    }


def _run_facts(
    argv: list[str], wall_s: float, step: KldStep, build: dict[str, Any]
) -> dict[str, Any]:
    return {
        "argv": argv,
        "wall_s": wall_s,
        "threads": step.settings.threads,
        "dataset": step.settings.dataset,
        "llama_cpp": build,
    }


def recorded(
    step: KldStep,
    measure: Callable[[], object],
    record: str,
    failures_dir: str,
    logits: str | None = None,
) -> None:
    """`measure()`, or, when it raises, its traceback in the rule's log and a failed record
    (write_failure): what each KL rule's body runs."""
    try:
        measure()
    except Exception as exc:
        traceback.print_exc()
        write_failure(step, record, failures_dir, exc, logits)


def write_failure(
    step: KldStep, record: str, failures_dir: str, exc: BaseException, logits: str | None = None
) -> None:
    """A failed step: its record says why (the table shows "failed: <reason>"), its counter is
    bumped so the next run retries it, and a base step's logits are left empty."""
    write_failed_stamp(
        record, failures_dir, failure_key(step.model, step.quant), exc, step.identity
    )
    if logits is not None:
        Path(f"{logits}.partial").unlink(missing_ok=True)
        Path(logits).write_bytes(b"")
