"""A workload's `shared_prefix`: `count` distinct prefixes of ShareGPT text, about `tokens` tokens
each (4 characters a token), put before every prompt round-robin; the CLI and a cell take it,
and a bad one is refused naming the key."""

from __future__ import annotations

import copy
import json

import pytest

from tests.loadgen.test_cli import recording_server, run_cli  # noqa: F401 (a fixture)
from tests.support.config import default_config, setter
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.loadgen.command import client_argv
from workflow_scripts.loadgen.datasets import PREFIX_CHARS_PER_TOKEN, load_dataset, shared_prefixes
from workflow_scripts.loadgen.prompts import DatasetError
from workflow_scripts.vocabulary import ConfigError


def sharegpt_file(path, conversations: int):
    """A small ShareGPT V3 file: each conversation a human question and a gpt answer of numbered
    words, so every turn's text is distinct."""
    items = [
        {
            "id": f"c{i}",
            "conversations": [
                {"from": "human", "value": f"question {i}?"},
                {"from": "gpt", "value": " ".join(f"answer{i}word{j}" for j in range(12))},
            ],
        }
        for i in range(conversations)
    ]
    path.write_text(json.dumps(items))
    return path


def test_prefixes_are_distinct_whole_words_of_about_the_asked_length():
    texts = [" ".join(f"t{i}w{j}" for j in range(30)) for i in range(20)]
    prefixes = shared_prefixes(texts, 50, 3)
    chars = 50 * PREFIX_CHARS_PER_TOKEN
    assert len(set(prefixes)) == 3
    whole = "\n\n".join(texts)
    longest_word = max(len(w) for w in whole.split())
    for prefix in prefixes:
        assert chars - longest_word - 2 <= len(prefix) <= chars
        assert prefix in whole and prefix.split()[-1] in whole.split()  # ends at a word's end
    assert prefixes[0].startswith(texts[0])  # file order, from the first turn
    with pytest.raises(DatasetError, match="too little text for 30 prefixes"):
        shared_prefixes(texts, 50, 30)


def test_the_prefixes_reach_the_server_round_robin(recording_server, tmp_path):  # noqa: F811
    url, seen = recording_server
    data = sharegpt_file(tmp_path / "sharegpt.json", 40)
    out = tmp_path / "run"
    flags = ["--shared-prefix-tokens", "30", "--shared-prefix-count", "3"]
    proc = run_cli(
        *["--base-url", url, "--dataset", "sharegpt", "--dataset-path", str(data), *flags],
        *["--num-prompts", "7", "--concurrency", "2", "--max-tokens", "4", "--out", str(out)],
    )
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    spec = {"kind": "sharegpt", "path": str(data)}
    prompts = load_dataset(spec, 7).prompts
    prefixes = shared_prefixes([t for i in range(40) for t in (f"question {i}?", answer(i))], 30, 3)
    expected = [f"{prefixes[i % 3]}\n\n{p.text}" for i, p in enumerate(prompts)]
    assert load_dataset(spec, 7, {"tokens": 30, "count": 3}).prompts[5].text == expected[5]
    sent = [r["body"]["messages"][0]["content"] for r in seen[1:]]  # after the warm-up
    assert sorted(sent) == sorted(expected)
    assert [sum(s.startswith(p + "\n\n") for s in sent) for p in prefixes] == [3, 2, 2]
    assert "3 shared prefixes of about 30 tokens" in metrics["dataset"]["note"]
    with pytest.raises(DatasetError, match="shared_prefix: not with conversations"):
        load_dataset({**spec, "conversations": True}, 2, {"tokens": 30, "count": 1})


def answer(i: int) -> str:
    return " ".join(f"answer{i}word{j}" for j in range(12))


def configured(workload_key: str, value) -> dict:
    config = copy.deepcopy(default_config())
    setter(["workloads", "c4", workload_key], value)(config)
    return validate_config(config)


def test_a_cell_carries_it_and_its_command_line_says_it():
    cell = next(
        c
        for c in build_cells(configured("shared_prefix", {"tokens": 500, "count": 2}))
        if c.workload == "c4"
    )
    assert cell.workload_spec.shared_prefix == {"tokens": 500, "count": 2}
    argv = client_argv(cell.workload_spec, "http://x:1", "out")
    assert argv[argv.index("--shared-prefix-tokens") + 1] == "500"
    assert argv[argv.index("--shared-prefix-count") + 1] == "2"
    plain = next(c for c in build_cells(validate_config(default_config())) if c.workload == "c4")
    assert "shared_prefix" not in plain.workload_spec.to_dict()  # absent: as before


@pytest.mark.parametrize(
    "value,expected",
    [({"count": 2}, "tokens"), ({"tokens": 0}, "tokens"), ({"tokens": 9, "size": 2}, "size")],
    ids=["no tokens", "zero tokens", "an unknown key"],
)
def test_a_bad_shared_prefix_is_refused_naming_the_key(value, expected):
    with pytest.raises(ConfigError) as error:
        build_cells(configured("shared_prefix", value))
    message = str(error.value)
    assert "workloads.c4" in message and expected in message, message


def test_a_config_asking_for_a_shared_prefix_on_conversations_is_refused_before_anything_runs():
    config = default_config()
    config["workloads"]["c4"]["dataset"]["conversations"] = True
    config["workloads"]["c4"]["shared_prefix"] = {"tokens": 64}
    with pytest.raises(ConfigError, match=r"workloads\.c4\.shared_prefix': not with conversations"):
        build_cells(validate_config(config))
