"""The prompt sources are a registry, one module a dataset kind: the kinds registered are the
schema's and the CLI's, a kind not registered is refused naming it, and a kind registered
(a stand-in loader here, not a real source) is what `load_dataset` reads, shared prefix and
all. The JSONL and HumanEval sources read their lines through the one JSON-lines reader, so a
line that is not JSON is refused by both in the same words, naming the file and the line."""

from __future__ import annotations

import gzip
import re

import pytest

from workflow_scripts.config.schema import load_schema
from workflow_scripts.loadgen.__main__ import parse_args
from workflow_scripts.loadgen.datasets import load_dataset
from workflow_scripts.loadgen.prompts import Dataset, DatasetError, Prompt
from workflow_scripts.loadgen.sources import known_kinds, load_source, register, registry
from workflow_scripts.loadgen.sources.humaneval import humaneval_texts
from workflow_scripts.loadgen.sources.jsonl import json_lines, load_jsonl


def cli_kinds(capsys) -> list[str]:
    """The standalone client's `--dataset` choices, as its refusal of another lists them."""
    required = ["--base-url", "http://x", "--num-prompts", "1", "--concurrency", "1"]
    with pytest.raises(SystemExit):
        parse_args([*required, "--max-tokens", "1", "--out", "o", "--dataset", "other"])
    return re.findall(r"'(\w+)'", capsys.readouterr().err.partition("choose from")[2])


def test_the_registered_kinds_are_the_schemas_and_the_clis(capsys):
    schema_kinds = load_schema()["$defs"]["dataset"]["properties"]["kind"]["enum"]
    assert known_kinds() == sorted(schema_kinds) == sorted(cli_kinds(capsys))
    assert known_kinds() == ["humaneval", "jsonl", "random", "sharegpt", "trace"]


def test_a_kind_not_registered_is_refused_naming_it():
    with pytest.raises(DatasetError, match="^unknown dataset kind 'sharegtp'$"):
        load_source({"kind": "sharegtp"}, 1)


def test_a_registered_kind_is_what_load_dataset_reads(monkeypatch, tmp_path):
    """A stand-in kind, registered for this test only: its loader gets the spec and the count,
    and a shared prefix (ShareGPT text, from a stand-in for the default package's file) goes
    before its prompts as before any kind's."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    asked = []

    @register("echo")
    def echo(spec, num_prompts):
        asked.append((dict(spec), num_prompts))
        return Dataset(
            [Prompt(i, f"say {spec['word']} {i}") for i in range(num_prompts)], "0", "echo"
        )

    assert "echo" in known_kinds()
    sharegpt = tmp_path / "s.json"
    sharegpt.write_text('[{"conversations": [{"from": "human", "value": "one two three"}]}]')
    data = load_dataset({"kind": "echo", "word": "hi"}, 2)
    assert [p.text for p in data.prompts] == ["say hi 0", "say hi 1"]
    assert asked == [({"kind": "echo", "word": "hi"}, 2)]
    monkeypatch.setattr(
        "workflow_scripts.loadgen.datasets.sharegpt_file", lambda package=None: sharegpt
    )
    prefixed = load_dataset({"kind": "echo", "word": "ho"}, 1, {"tokens": 2, "count": 1})
    assert [p.text for p in prefixed.prompts] == ["one two\n\nsay ho 0"]


def test_the_json_lines_reader_names_each_line_and_skips_blank_ones(tmp_path):
    lines = ['{"a": 1}', "   ", "[2]", "", "3"]
    assert list(json_lines(tmp_path / "f", lines)) == [
        (f"{tmp_path / 'f'}:1", {"a": 1}),
        (f"{tmp_path / 'f'}:3", [2]),
        (f"{tmp_path / 'f'}:5", 3),
    ]


def test_jsonl_and_humaneval_refuse_a_line_that_is_not_json_in_the_same_words(tmp_path):
    plain = tmp_path / "p.jsonl"
    plain.write_text('{"prompt": "fine"}\n\n{"prompt": oops}\n')
    packed = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as handle:
        handle.write('{"prompt": "def f():"}\n\n{"prompt": oops}\n')
    with pytest.raises(DatasetError) as jsonl_error:
        load_jsonl(plain, 1)
    with pytest.raises(DatasetError) as humaneval_error:
        humaneval_texts(packed)
    assert str(jsonl_error.value) == f"{plain}:3: not JSON: Expecting value"
    assert str(humaneval_error.value) == f"{packed}:3: not JSON: Expecting value"


def test_humaneval_refuses_a_problem_without_code_naming_its_line(tmp_path):
    packed = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as handle:
        handle.write('{"prompt": "def f():"}\n{"prompt": "  "}\n')
    with pytest.raises(DatasetError, match=rf"^{packed}:2: needs a non-empty 'prompt' string$"):
        humaneval_texts(packed)
