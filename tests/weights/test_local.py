"""The `local` weights source: a file or a checkpoint folder, hashed in place, never copied."""

from __future__ import annotations

import hashlib

import pytest

from workflow_scripts.weights.fetch import WeightsError, fetch_weights


def test_file_hashed_in_place(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 100)
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    manifest = fetch_weights({"source": "local", "path": str(gguf)}, tmp_path / "m.json")
    assert manifest["primary"] == str(gguf)
    assert manifest["files"] == [
        {"path": str(gguf), "name": "model.gguf", "size": 104, "sha256": digest}
    ]
    assert manifest["resolved_revision"] == digest
    with pytest.raises(WeightsError, match="does not match " + "0" * 64):
        fetch_weights(
            {"source": "local", "path": str(gguf), "sha256": "0" * 64}, tmp_path / "bad.json"
        )
    gguf.write_bytes(b"PK\3\4not a gguf")
    with pytest.raises(WeightsError, match="is not a GGUF file"):
        fetch_weights({"source": "local", "path": str(gguf)}, tmp_path / "bad.json")


def test_folder_listed_with_relative_names(tmp_path):
    folder = tmp_path / "checkpoint"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "sub" / "model.safetensors").write_bytes(b"x" * 10)
    manifest = fetch_weights({"source": "local", "path": str(folder)}, tmp_path / "m.json")
    assert manifest["primary"] == str(folder)
    assert [f["name"] for f in manifest["files"]] == ["config.json", "sub/model.safetensors"]
    assert manifest["total_bytes"] == 12
    before = manifest["resolved_revision"]
    (folder / "config.json").write_text('{"changed": true}')
    after = fetch_weights({"source": "local", "path": str(folder)}, tmp_path / "m.json")
    assert after["resolved_revision"] != before
    with pytest.raises(WeightsError, match="local weights not found"):
        fetch_weights({"source": "local", "path": str(tmp_path / "nope")}, tmp_path / "x.json")
