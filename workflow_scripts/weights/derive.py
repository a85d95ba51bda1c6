"""Derived weights: a weights entry made from another quant of the same model, as a DAG step.

Three conversions (`convert`), which chain into the quant axis (one source, several quants):

- `gguf-to-hf`: a GGUF dequantized to Hugging Face safetensors (what vLLM loads), by
  transformers in the conversion venv (`converters.venv`), chat template included;
- `hf-to-gguf`: a Hugging Face folder to GGUF by the pinned llama.cpp tree's own
  `convert_hf_to_gguf.py`, in the same venv (the tree is kept by the engine's build);
- `quantize`: a GGUF requantized by `llama-quantize`, built with the engine's llama-server.

The output is cached under a key of what decides its bytes: the conversion and its parameter,
the source files' sha256 and the tool's identity (venv key, converter script, llama.cpp build).
An unchanged source and tool never convert twice; a changed one never reuses an old output.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..atomic import canonical_json, write_json
from ..paths import cache_dir
from ..registry_fetch import sha256_file
from ..text import first_line
from ..venv import VenvError, VenvSettings, provision_venv
from ..vocabulary import Status
from .files import StepInputs, WeightsError, check_free_space, file_entry

CONVERTS = ("gguf-to-hf", "hf-to-gguf", "quantize")
USES_VENV = frozenset({"gguf-to-hf", "hf-to-gguf"})
# hf-to-gguf takes the tree's converter, quantize its llama-quantize: both from an engine build.
USES_BUILD = frozenset({"hf-to-gguf", "quantize"})
# What each conversion reads and writes: "gguf" (a file) or "hf" (a safetensors folder).
READS = {"gguf-to-hf": "gguf", "hf-to-gguf": "hf", "quantize": "gguf"}
WRITES = {"gguf-to-hf": "hf", "hf-to-gguf": "gguf", "quantize": "gguf"}
# The one parameter each conversion takes, and its default.
PARAMETER = {"gguf-to-hf": "dtype", "hf-to-gguf": "outtype", "quantize": "type"}
DEFAULTS = {"dtype": "bfloat16", "outtype": "f16"}
HF_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
GGUF_OUTTYPES = ("f32", "f16", "bf16", "q8_0")  # convert_hf_to_gguf.py --outtype, less `auto`
# llama-quantize's types (QUANT_OPTIONS in the pinned tree's tools/quantize/quantize.cpp) ...
QUANTIZE_TYPES = (
    "Q1_0", "Q2_0", "Q4_0", "Q4_1", "MXFP4_MOE", "Q5_0", "Q5_1", "IQ2_XXS", "IQ2_XS", "IQ2_S",
    "IQ2_M", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0", "Q2_K", "Q2_K_S", "IQ3_XXS", "IQ3_S", "IQ3_M",
    "Q3_K", "IQ3_XS", "Q3_K_S", "Q3_K_M", "Q3_K_L", "IQ4_NL", "IQ4_XS", "Q4_K", "Q4_K_S",
    "Q4_K_M", "Q5_K", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16", "F32", "COPY",
)  # fmt: skip
# ... less those it refuses without an importance matrix (`--imatrix`), which no step makes.
NEEDS_IMATRIX = ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "Q2_K_S")
CONVERT_TIMEOUT_S = 3600.0
GGUF_TO_HF_SCRIPT = Path(__file__).with_name("convert_gguf_to_hf.py")
RECORD = "derived.json"


def quantize_type_problem(name: str) -> str | None:
    """Why llama-quantize would not make `name` here; None when it would."""
    upper = name.upper()
    if upper in NEEDS_IMATRIX:
        return (
            f"'{name}' needs an importance matrix (llama-quantize --imatrix), which no step makes"
        )
    if upper not in QUANTIZE_TYPES:
        known = ", ".join(t.lower() for t in QUANTIZE_TYPES if t not in NEEDS_IMATRIX)
        return f"llama-quantize knows no type '{name}' (known: {known})"
    return None


def weights_format(spec: dict[str, Any]) -> str | None:
    """What an engine is handed for a weights entry: "gguf" (a GGUF file), "hf" (safetensors:
    a `.safetensors` file, a local folder, a hub snapshot whose patterns fetch no GGUF), or
    None where only the fetched files can tell (a whole hub repo, a local path not there yet).
    The one place that knows it: validation and derivations both ask here."""
    source = spec.get("source")
    if source == "derived":
        return WRITES.get(spec.get("convert", ""))
    if source == "synthetic":
        return "gguf"
    name = str(spec.get("filename") or spec.get("path") or "")
    if name.endswith(".gguf"):
        return "gguf"
    if name.endswith(".safetensors"):
        return "hf"
    if source == "local" and name and Path(name).expanduser().is_dir():
        return "hf"  # fetch_local hands the folder itself to the engine
    patterns = [str(p) for p in spec.get("patterns") or []] if source == "hf" else []
    if patterns and not name:
        if all(p.endswith(".gguf") for p in patterns):
            return "gguf"
        if not any(_may_name_gguf(p) for p in patterns):
            return "hf"  # fetch_hf hands over the snapshot folder: no GGUF in it
    return None


def _may_name_gguf(pattern: str) -> bool:
    """Whether a hub allow pattern could fetch a GGUF: one ending in another file extension
    (`*.safetensors`, `config.json`) cannot."""
    tail = pattern.rpartition("/")[2]
    stem, dot, extension = tail.rpartition(".")
    literal = dot and stem and extension.isalnum()
    return not literal or extension == "gguf"


@dataclass(frozen=True)
class Derivation:
    """A derived entry as `matrix.validate_config` resolved it: what to make, from what, how."""

    convert: str
    parameter: str  # bfloat16 | f16 | q8_0 ...: the dtype, outtype or quantize type
    source_key: str  # `model__quant` of the source entry (its manifest's name)
    source_model: str
    source_quant: str
    engine: str | None
    venv: VenvSettings | None

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> Derivation:
        origin = spec.get("derived_from") or {}
        if "weights" not in origin:
            raise WeightsError(
                f"derived weights from '{spec.get('from')}' were not resolved; load the config "
                "through matrix.validate_config"
            )
        convert = spec["convert"]
        key = PARAMETER[convert]
        return cls(
            convert=convert,
            parameter=str(spec.get(key) or DEFAULTS[key]),
            source_key=f"{origin['model']}__{origin['quant']}",
            source_model=origin["model"],
            source_quant=origin["quant"],
            engine=spec.get("engine"),
            venv=VenvSettings.from_config(spec["venv"]) if convert in USES_VENV else None,
        )

    @property
    def label(self) -> str:
        """What the output is, as a quant name: bf16, f16, q8_0."""
        if self.convert == "gguf-to-hf":
            return HF_DTYPES[self.parameter]
        return self.parameter.lower()

    @property
    def output_name(self) -> str:
        suffix = ".gguf" if WRITES[self.convert] == "gguf" else ""
        return f"{self.source_model}-{self.label}{suffix}"


@dataclass(frozen=True)
class Source:
    """The source entry's manifest: the files it holds and what the engines load."""

    key: str
    quant: str
    primary: Path
    files: list[dict[str, Any]]
    provenance: str | None

    @classmethod
    def from_manifest(cls, derivation: Derivation, path: Path | None) -> Source:
        if path is None or not Path(path).is_file():
            raise WeightsError(
                f"the manifest of source weights '{derivation.source_key}' is missing"
            )
        manifest = json.loads(Path(path).read_text())
        if manifest.get("status") == Status.FAILED:
            reason = first_line(manifest.get("reason") or "no reason recorded")
            raise WeightsError(f"source weights '{derivation.source_key}' failed: {reason}")
        return cls(
            key=derivation.source_key,
            quant=derivation.source_quant,
            primary=Path(manifest["primary"]),
            files=manifest["files"],
            provenance=manifest.get("provenance"),
        )

    def digest_material(self) -> list[list[str]]:
        return sorted([f["name"], f["sha256"]] for f in self.files)


@dataclass(frozen=True)
class Tools:
    """The programs a conversion runs, and what identifies them in the cache key."""

    python: str | None = None  # the conversion venv's interpreter
    venv: dict[str, Any] | None = None  # its record (versions, pip freeze digest)
    build: dict[str, Any] | None = None  # the engine stamp (llama-quantize, converter tree)

    def identity(self, convert: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.venv is not None:
            out["venv"] = Path(self.venv["folder"]).name
            out["pip_freeze_sha256"] = self.venv["pip_freeze_sha256"]
        if convert == "gguf-to-hf":
            out["script_sha256"] = sha256_file(GGUF_TO_HF_SCRIPT)
        if convert == "hf-to-gguf" and self.build is not None:
            out["tree"] = self.build["sdist_sha256"]  # the converter is the sdist's, not a binary
        if convert == "quantize" and self.build is not None:
            out["build"] = self.build["key"]
        return out

    def versions(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.venv is not None:
            out.update(
                {
                    "venv": self.venv["folder"],
                    "packages": self.venv["versions"],
                    "pip_freeze_sha256": self.venv["pip_freeze_sha256"],
                    "venv_install_s": self.venv["install_s"],  # when it was made, once
                }
            )
        if self.build is not None:
            out["llama_cpp"] = {
                "source": llama_cpp_source(self.build),
                "build_key": self.build["key"],
                "version": self.build.get("version"),
            }
        return out


def llama_cpp_source(stamp: dict[str, Any]) -> str:
    """`llama-cpp-python 0.3.36 (vendor/llama.cpp)`: the pinned source, which the server's own
    `--version` (the stamp's `version`) cannot name ("commit unknown" for an sdist's tree)."""
    sdist = str(stamp.get("sdist") or "")
    version = sdist.removesuffix(".tar.gz").rpartition("-")[2] if sdist else "?"
    return f"{stamp.get('package', 'llama-cpp-python')} {version} (vendor/llama.cpp)"


def _engine_build(derivation: Derivation, stamp_path: Path | None) -> dict[str, Any]:
    """The engine stamp, checked to hold what the conversion runs."""
    name = derivation.engine
    if stamp_path is None or not Path(stamp_path).is_file():
        raise WeightsError(f"the stamp of engine '{name}' is missing (its engine step makes it)")
    stamp = json.loads(Path(stamp_path).read_text())
    if stamp.get("status") == Status.FAILED:
        reason = first_line(stamp.get("reason") or "no reason recorded")
        raise WeightsError(f"engine '{name}' is not available, so neither are its tools: {reason}")
    needed = "tree" if derivation.convert == "hf-to-gguf" else "quantize"
    if not stamp.get(needed):
        raise WeightsError(
            f"engine '{name}' was provisioned before its build kept llama-quantize and the "
            f"converter: rerun its engine step (snakemake --forcerun engine)"
        )
    return stamp


def _tools(derivation: Derivation, inputs: StepInputs) -> Tools:
    venv = python = build = None
    if derivation.venv is not None:
        try:
            venv = provision_venv(derivation.venv, label="converters")
        except VenvError as exc:
            raise WeightsError(f"the conversion venv could not be made: {exc}") from exc
        python = venv["python"]
    if derivation.convert in USES_BUILD:
        build = _engine_build(derivation, inputs.engine_stamp)
    return Tools(python=python, venv=venv, build=build)


def cache_key(derivation: Derivation, source: Source, tools: Tools) -> str:
    material = {
        "convert": derivation.convert,
        "parameter": derivation.parameter,
        "source_files": source.digest_material(),
        "tools": tools.identity(derivation.convert),
    }
    return hashlib.sha256(canonical_json(material).encode()).hexdigest()[:16]


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> str:
    """Run one conversion; its output goes to stderr (the rule's log), its failure is raised
    with the last lines, not a traceback of ours."""
    print(f"$ {' '.join(argv)}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=CONVERT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        raise WeightsError(f"{what} did not finish in {CONVERT_TIMEOUT_S:.0f} s") from exc
    sys.stderr.write(proc.stdout + proc.stderr)
    sys.stderr.flush()
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        raise WeightsError(f"{what} failed (exit {proc.returncode}): " + " | ".join(lines[-5:]))
    return proc.stdout


def _require(source: Source, fmt: str, convert: str) -> None:
    if fmt == "gguf" and not (source.primary.is_file() and source.primary.suffix == ".gguf"):
        raise WeightsError(f"{convert} needs a GGUF file; '{source.key}' is {source.primary}")
    if fmt == "hf" and not (source.primary / "config.json").is_file():
        raise WeightsError(
            f"{convert} needs a Hugging Face folder (config.json, safetensors); "
            f"'{source.key}' is {source.primary}"
        )


def _gguf_to_hf(derivation: Derivation, source: Source, tools: Tools, out: Path) -> dict:
    stdout = _run(
        [tools.python, str(GGUF_TO_HF_SCRIPT), str(source.primary), str(out), derivation.parameter],
        "GGUF -> Hugging Face conversion",
    )
    summary = json.loads(stdout.strip().splitlines()[-1])
    if not summary.get("chat_template"):
        print(
            f"note: {source.primary.name} carries no chat template; the engines' own applies",
            file=sys.stderr,
        )
    return summary


def _hf_to_gguf(derivation: Derivation, source: Source, tools: Tools, out: Path) -> dict:
    tree = Path(tools.build["tree"])
    env = {**os.environ, "PYTHONPATH": str(tree / "gguf-py")}
    argv = [tools.python, str(tree / "convert_hf_to_gguf.py"), str(source.primary)]
    argv += ["--outfile", str(out), "--outtype", derivation.parameter]
    _run(argv, "Hugging Face -> GGUF conversion (convert_hf_to_gguf.py)", env)
    return {}


def _quantize(derivation: Derivation, source: Source, tools: Tools, out: Path) -> dict:
    argv = [tools.build["quantize"], str(source.primary), str(out), derivation.parameter.upper()]
    _run(argv, "llama-quantize")
    return {}


CONVERTERS = {"gguf-to-hf": _gguf_to_hf, "hf-to-gguf": _hf_to_gguf, "quantize": _quantize}


def provenance(derivation: Derivation, source: Source, tools: Tools, made: dict) -> str:
    """One sentence a card can show: what this is and what it was made from, down the chain."""
    name = source.primary.name
    if derivation.convert == "gguf-to-hf":
        by = f"transformers {made.get('transformers', '?')}"
        text = f"{derivation.label}, dequantized by {by} from the {source.quant} GGUF {name}"
    elif derivation.convert == "hf-to-gguf":
        text = (
            f"{derivation.label}, converted by convert_hf_to_gguf.py of "
            f"{llama_cpp_source(tools.build)} from the {source.quant} safetensors {name}"
        )
    else:
        text = (
            f"{derivation.label}, quantized by llama-quantize of {llama_cpp_source(tools.build)} "
            f"from the {source.quant} GGUF {name}"
        )
    return f"{text}; {source.provenance}" if source.provenance else text


def _output_files(output: Path) -> list[dict[str, Any]]:
    if output.is_dir():
        return [
            file_entry(p, str(p.relative_to(output)))
            for p in sorted(output.rglob("*"))
            if p.is_file()
        ]
    return [file_entry(output)]


def _estimated_bytes(derivation: Derivation, source: Source) -> int:
    """Room to ask for before converting: dequantizing a 4-bit GGUF to 16 bits about
    quadruples it; the other conversions write at most about what they read."""
    size = sum(f["size"] for f in source.files)
    return size * 5 if derivation.convert == "gguf-to-hf" else int(size * 1.1)


def derive(spec: dict[str, Any], inputs: StepInputs) -> dict[str, Any]:
    """Make (or find in the cache) one derived entry; return its manifest fields."""
    derivation = Derivation.from_spec(spec)
    source = Source.from_manifest(derivation, inputs.source_manifest)
    _require(source, READS[derivation.convert], derivation.convert)
    tools = _tools(derivation, inputs)
    key = cache_key(derivation, source, tools)
    folder = cache_dir("weights", f"derived-{key}")
    record_path = folder / RECORD
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = json.loads(record_path.read_text()) if record_path.is_file() else None
        if record is None or not (folder / record["output"]).exists():
            record = _convert(derivation, source, tools, folder, key)
            write_json(record_path, record)
    output = folder / record["output"]
    return {
        "resolved": record,
        "resolved_revision": f"derived {key}",
        "provenance": record["provenance"],
        "files": _output_files(output),
        "primary": str(output),
    }


def _convert(
    derivation: Derivation, source: Source, tools: Tools, folder: Path, key: str
) -> dict[str, Any]:
    """Convert into a temporary name in the cache folder, then rename: an interrupted
    conversion leaves nothing that looks made."""
    check_free_space(folder, _estimated_bytes(derivation, source))
    staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=folder))
    try:
        staged = staging / derivation.output_name
        started = time.monotonic()
        made = CONVERTERS[derivation.convert](derivation, source, tools, staged)
        convert_s = round(time.monotonic() - started, 1)
        if not staged.exists():
            raise WeightsError(f"{derivation.convert} wrote no {staged.name}")
        final = folder / derivation.output_name
        if final.is_dir():
            shutil.rmtree(final)
        os.replace(staged, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {
        "convert": derivation.convert,
        "parameter": derivation.parameter,
        "label": derivation.label,
        "output": derivation.output_name,
        "cache_key": key,
        "source": {
            "key": source.key,
            "primary": source.primary.name,
            "files": [{k: f[k] for k in ("name", "size", "sha256")} for f in source.files],
        },
        "tools": tools.versions(),
        "tool_identity": tools.identity(derivation.convert),
        "converted": made,
        "convert_s": convert_s,
        "provenance": provenance(derivation, source, tools, made),
        "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
