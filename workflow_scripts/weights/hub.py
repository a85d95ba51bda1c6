"""Hugging Face hub downloads: a pinned revision, chosen files, verified, in the hub's own cache.

The revision (branch, tag or sha) is resolved to a commit sha first and everything after uses the
sha, so what is recorded is what was fetched. Files land in the standard hub cache (`HF_HUB_CACHE`,
else `HF_HOME/hub`), so engines that read that cache (vLLM given a repo id and `--revision <sha>`)
reuse them. Downloads resume: huggingface_hub picks a dropped transfer up with a Range request,
and files already in the cache are not fetched again, so a rerun fetches only what is missing.
The token comes only from `HF_TOKEN` and goes only into request headers.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

DEFAULT_ENDPOINT = "https://huggingface.co"
DISK_MARGIN = 1.05  # headroom for the cache's temp files and metadata


class HubError(RuntimeError):
    """A hub download that cannot go ahead or did not verify; the message names the culprit."""


@dataclass(frozen=True)
class RepoFile:
    """One file of a repo at a commit, as the hub describes it."""

    path: str
    size: int
    blob_id: str  # git sha1 of the blob
    lfs_sha256: str | None

    @property
    def etag(self) -> str:
        """The hub cache names blobs by this (the sha256 for LFS files, else the git sha1)."""
        return self.lfs_sha256 or self.blob_id


@dataclass(frozen=True)
class Snapshot:
    """What was fetched: the commit, the chosen files and where they are."""

    repo: str
    revision: str
    revision_sha: str
    endpoint: str
    hub_cache: Path
    folder: Path
    files: list[RepoFile]


def hub_cache_dir() -> Path:
    """The cache huggingface_hub itself uses, read from the environment at call time."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME")
    if not home:
        xdg = os.environ.get("XDG_CACHE_HOME")
        home = str(Path(xdg).expanduser() / "huggingface") if xdg else "~/.cache/huggingface"
    return Path(home).expanduser() / "hub"


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def public_endpoint(endpoint: str) -> str:
    """The endpoint without any user:password part, safe to record."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _token() -> str | bool:
    """`HF_TOKEN` or no token at all: never the token file, never a config value."""
    return os.environ.get("HF_TOKEN") or False


def _matching(files: list[RepoFile], patterns: list[str] | None) -> list[RepoFile]:
    from huggingface_hub.utils import filter_repo_objects

    return list(filter_repo_objects(files, allow_patterns=patterns, key=lambda f: f.path))


def _storage_folder(hub_cache: Path, repo: str) -> Path:
    return hub_cache / ("models--" + repo.replace("/", "--"))


def _check_disk_space(hub_cache: Path, repo: str, files: list[RepoFile]) -> None:
    """Fail before downloading when the blobs still missing do not fit."""
    blobs = _storage_folder(hub_cache, repo) / "blobs"
    missing = [f for f in files if not (blobs / f.etag).is_file()]
    needed_bytes = sum(f.size for f in missing)
    probe = hub_cache
    while not probe.exists():
        probe = probe.parent
    free_bytes = shutil.disk_usage(probe).free
    if free_bytes < needed_bytes * DISK_MARGIN:
        raise HubError(
            f"not enough disk space for {repo}: {len(missing)} files need "
            f"{needed_bytes / 2**30:.2f} GiB, {hub_cache} has {free_bytes / 2**30:.2f} GiB free"
        )


def _resolve(api: Any, repo: str, revision: str, token: str | bool) -> tuple[str, list[RepoFile]]:
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        info = api.model_info(repo, revision=revision, files_metadata=True, token=token)
    except RevisionNotFoundError as exc:
        raise HubError(f"revision '{revision}' not found in repo '{repo}'") from exc
    except GatedRepoError as exc:
        raise HubError(
            f"repo '{repo}' is gated: accept its terms on the hub and set HF_TOKEN"
        ) from exc
    except RepositoryNotFoundError as exc:
        hint = "" if token else " (if it is private or gated, set HF_TOKEN)"
        raise HubError(f"repo '{repo}' not found{hint}") from exc
    except HfHubHTTPError as exc:
        raise HubError(f"could not resolve '{repo}@{revision}': {exc}") from exc
    if not info.sha:
        raise HubError(f"the hub did not resolve '{repo}@{revision}' to a commit")
    files = [
        RepoFile(
            path=s.rfilename,
            size=int(s.lfs.size if s.lfs else s.size or 0),
            blob_id=s.blob_id or "",
            lfs_sha256=s.lfs.sha256 if s.lfs else None,
        )
        for s in info.siblings or []
    ]
    return info.sha, files


def _hashes(path: Path, size: int) -> tuple[str, str]:
    """(sha256, git blob sha1) in one read."""
    sha256 = hashlib.sha256()
    blob_sha1 = hashlib.sha1(f"blob {size}\0".encode())
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            sha256.update(block)
            blob_sha1.update(block)
    return sha256.hexdigest(), blob_sha1.hexdigest()


def _verify(snapshot_dir: Path, repo: str, sha: str, files: list[RepoFile]) -> dict[str, str]:
    """sha256 of every file, checked against the hub's record; a bad copy is removed from the
    cache so the next run downloads it again instead of failing forever."""
    digests = {}
    for f in files:
        local = snapshot_dir / f.path
        if not local.is_file():
            raise HubError(f"{repo}@{sha[:12]}: '{f.path}' is missing from {snapshot_dir}")
        size = local.stat().st_size
        sha256, blob_sha1 = _hashes(local, size)
        expected = f.lfs_sha256 or f.blob_id
        actual = sha256 if f.lfs_sha256 else blob_sha1
        if size != f.size or (expected and actual != expected):
            blob = local.resolve()
            local.unlink(missing_ok=True)
            blob.unlink(missing_ok=True)
            kind = "sha256" if f.lfs_sha256 else "git sha1"
            raise HubError(
                f"{repo}@{sha[:12]}: '{f.path}' does not verify: {kind} {actual} ({size} bytes), "
                f"the hub says {expected} ({f.size} bytes); the bad copy was removed"
            )
        digests[f.path] = sha256
    return digests


def download(
    repo: str,
    revision: str,
    patterns: list[str] | None = None,
    required: list[str] | None = None,
    max_workers: int = 4,
) -> tuple[Snapshot, dict[str, str]]:
    """Resolve, check space, download the matching files, verify; return them with sha256s.

    `required` names files that must be among the matches (e.g. the GGUF the engine loads).
    """
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
    )

    endpoint = hub_endpoint()
    token = _token()
    hub_cache = hub_cache_dir()
    api = HfApi(endpoint=endpoint, token=token)
    sha, repo_files = _resolve(api, repo, revision, token)
    chosen = _matching(repo_files, patterns)
    if not chosen:
        available = ", ".join(f.path for f in repo_files[:20]) or "none"
        raise HubError(f"no file of '{repo}@{revision}' matches {patterns} (files: {available})")
    chosen_paths = {f.path for f in chosen}
    for name in required or []:
        if name not in chosen_paths:
            where = (
                "is not matched by the patterns"
                if any(f.path == name for f in repo_files)
                else "not found"
            )
            raise HubError(f"file '{name}' {where} in '{repo}@{revision}' (commit {sha[:12]})")
    hub_cache.mkdir(parents=True, exist_ok=True)
    _check_disk_space(hub_cache, repo, chosen)
    print(
        f"hub: {repo}@{revision} -> {sha}; {len(chosen)} files, "
        f"{sum(f.size for f in chosen) / 2**30:.3f} GiB, from {public_endpoint(endpoint)}",
        file=sys.stderr,
    )
    try:
        folder = snapshot_download(
            repo,
            revision=sha,
            allow_patterns=sorted(chosen_paths),
            cache_dir=hub_cache,
            endpoint=endpoint,
            token=token,
            max_workers=max_workers,
        )
    except LocalEntryNotFoundError as exc:
        raise HubError(f"could not download '{repo}@{sha[:12]}': {exc}") from exc
    except EntryNotFoundError as exc:
        raise HubError(f"a file of '{repo}@{sha[:12]}' was not found on the hub: {exc}") from exc
    except HfHubHTTPError as exc:
        raise HubError(f"downloading '{repo}@{sha[:12]}' failed: {exc}") from exc
    snapshot = Snapshot(
        repo=repo,
        revision=revision,
        revision_sha=sha,
        endpoint=public_endpoint(endpoint),
        hub_cache=hub_cache,
        folder=Path(folder),
        files=sorted(chosen, key=lambda f: f.path),
    )
    return snapshot, _verify(snapshot.folder, repo, sha, snapshot.files)
