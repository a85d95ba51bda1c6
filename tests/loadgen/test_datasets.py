"""Prompt sources: the ShareGPT file cut off mid-object (as the registry package ships it),
JSONL, random; the selection order, the seeded shuffle, and the sha256 that goes into results."""

from __future__ import annotations

import hashlib
import json

import pytest

from workflow_scripts.loadgen.datasets import load_dataset
from workflow_scripts.loadgen.prompts import DatasetError
from workflow_scripts.loadgen.sources.jsonl import load_jsonl
from workflow_scripts.loadgen.sources.random_words import load_random
from workflow_scripts.loadgen.sources.sharegpt import iter_json_array, load_sharegpt


def conversation(i: int, first: str) -> dict:
    return {
        "id": f"c{i}",
        "conversations": [
            {"from": "human", "value": first},
            {"from": "gpt", "value": f"answer {i}"},
        ],
    }


@pytest.fixture
def truncated_sharegpt(tmp_path):
    """Five whole conversations (one with an empty first turn), then a sixth cut mid-object."""
    items = [
        conversation(0, "first question"),
        conversation(1, "   "),
        conversation(2, "second question"),
        {"id": "c3", "conversations": []},
        conversation(4, "third question"),
        conversation(5, "never seen"),
    ]
    text = json.dumps(items, indent=1)
    cut = text.index('"never seen"') + 5  # inside the sixth object's string
    path = tmp_path / "sharegpt_cut.json"
    path.write_text(text[:cut])
    with pytest.raises(json.JSONDecodeError):
        json.loads(path.read_text())  # what a plain json.load would do with it
    return path


def test_truncated_sharegpt_keeps_every_complete_conversation(truncated_sharegpt):
    items = list(iter_json_array(truncated_sharegpt.read_text()))
    assert [item["id"] for item in items] == ["c0", "c1", "c2", "c3", "c4"]
    data = load_sharegpt(truncated_sharegpt, 3)
    assert [p.text for p in data.prompts] == ["first question", "second question", "third question"]
    assert [p.index for p in data.prompts] == [0, 1, 2]
    assert data.sha256 == hashlib.sha256(truncated_sharegpt.read_bytes()).hexdigest()
    assert "5 complete conversations" in data.note
    with pytest.raises(DatasetError):
        load_sharegpt(truncated_sharegpt, 4)


def test_seeded_shuffle_is_reproducible_and_indices_point_at_the_text(truncated_sharegpt):
    a = load_sharegpt(truncated_sharegpt, 3, shuffle_seed=11)
    b = load_sharegpt(truncated_sharegpt, 3, shuffle_seed=11)
    assert a.prompts == b.prompts
    ordered = load_sharegpt(truncated_sharegpt, 3).prompts
    assert sorted(p.index for p in a.prompts) == [0, 1, 2]
    assert all(ordered[p.index].text == p.text for p in a.prompts)


def test_jsonl_prompts_and_errors(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "one", "output_len": 5}\n\n{"text": "two"}\n')
    data = load_jsonl(path, 2)
    assert [(p.index, p.text, p.expected_output_len) for p in data.prompts] == [
        (0, "one", 5),
        (1, "two", None),
    ]
    assert data.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": ""}\n')
    with pytest.raises(DatasetError, match=":2:"):
        load_jsonl(bad, 1)


def test_random_prompts_are_seeded():
    a = load_random(4, input_len=16, seed=1)
    assert a.prompts == load_random(4, input_len=16, seed=1).prompts
    assert a.prompts != load_random(4, input_len=16, seed=2).prompts
    assert all(len(p.text.split()) == 16 for p in a.prompts)
    texts = [p.text for p in load_dataset({"kind": "random", "input_len": 3}, 2).prompts]
    assert (
        load_dataset({"kind": "random", "input_len": 3}, 2).sha256
        == hashlib.sha256(json.dumps(texts).encode()).hexdigest()
    )
