"""The KL divergence steps without running the tool: llama-perplexity's output read from
recordings (tests/fixtures/fidelity/, recorded from the pinned build on the default's SmolLM2:
f16 base, q4_0 against it), what is refused, the fixed text, and which steps a matrix gets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.config import default_config
from tests.support.engines import smollm2_chain_quants
from workflow_scripts.fidelity import kld
from workflow_scripts.fidelity.kld import (
    base_argv,
    check_chunks,
    conversation_text,
    kld_argv,
    measure_kld,
    recorded,
    sha256_bytes,
    write_failure,
)
from workflow_scripts.fidelity.kld_plan import KldSettings, KldStep
from workflow_scripts.fidelity.perplexity_output import (
    BaseFigures,
    PerplexityError,
    parse_base,
    parse_kld,
)
from workflow_scripts.workflow.dag import build_dag
from workflow_scripts.workflow.fidelity_steps import UnknownCell

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fidelity"
# RECORDED: `llama-perplexity` of llama-cpp-python 0.3.36's tree, SmolLM2-135M, ctx 256 x 8
# chunks, 1 thread (tests/fixtures/fidelity/README.md says how).
BASE_OUTPUT = (FIXTURES / "base_f16.txt").read_text()
KLD_OUTPUT = (FIXTURES / "kld_q4_0.txt").read_text()


def printed(output: str, label: str) -> list[float]:
    """The numbers on the recording's line that starts with `label`, read independently of the
    parser (split on whitespace, `±` and `%` dropped)."""
    line = next(ln for ln in output.splitlines() if ln.startswith(label))
    tail = line.split(":", 1)[1].replace("±", " ").replace("%", " ")
    return [float(word) for word in tail.split()]


def test_the_base_run_gives_its_chunks_and_perplexity():
    figures = parse_base(BASE_OUTPUT)
    final = re.search(r"PPL = (\S+) \+/- (\S+)", BASE_OUTPUT)
    assert (figures.perplexity, figures.perplexity_err) == (
        float(final.group(1)),
        float(final.group(2)),
    )
    assert (figures.chunks, figures.ctx) == (8, 256)
    check_chunks(figures, KldSettings(ctx=256, chunks=8))


def test_the_kld_run_gives_every_figure_with_its_uncertainty():
    figures = parse_kld(KLD_OUTPUT)
    assert [figures.kld_mean, figures.kld_mean_err] == printed(KLD_OUTPUT, "Mean    KLD")
    assert [figures.same_top_pct, figures.same_top_pct_err] == printed(KLD_OUTPUT, "Same top p")
    assert [figures.perplexity, figures.perplexity_err] == printed(KLD_OUTPUT, "Mean PPL(Q)")
    assert figures.perplexity_base == printed(KLD_OUTPUT, "Mean PPL(base)")[0]
    assert figures.kld_p99 == printed(KLD_OUTPUT, "99.0%   KLD")[0]
    assert figures.kld_max == printed(KLD_OUTPUT, "Maximum KLD")[0]
    assert figures.kld_percentiles["median"] == printed(KLD_OUTPUT, "Median  KLD")[0]
    assert len(figures.kld_percentiles) == 11  # max, 99.9 ... 0.1, median, min
    record = figures.to_dict()
    assert record["kld_p99"] == figures.kld_p99 and record["chunks"] == 8
    # a quant's KL is positive and its top token mostly the reference's
    assert figures.kld_mean > 0 and 50 < figures.same_top_pct < 100


def test_an_output_cut_before_the_statistics_names_the_missing_figure():
    """The tool prints no statistics under 100 scored tokens, and exits 0."""
    cut = KLD_OUTPUT.split("====== KL divergence statistics")[0]
    with pytest.raises(PerplexityError, match="no kld_mean"):
        parse_kld(cut)
    without_p99 = "\n".join(ln for ln in KLD_OUTPUT.splitlines() if not ln.startswith("99.0%"))
    with pytest.raises(PerplexityError, match="no KLD 99.0 line"):
        parse_kld(without_p99)


def with_line(output: str, label: str, line: str) -> str:
    """The recording with its line that starts with `label` (after a log prefix such as
    `0.09.163.309 I `) replaced from there on (a STAND-IN output: the pinned build printed no
    such line on the default's quants)."""
    found = next(ln for ln in output.splitlines() if ln.split(" I ")[-1].startswith(label))
    changed = output.replace(found, found[: found.index(label)] + line)
    assert changed != output
    return changed


@pytest.mark.parametrize(
    ("output", "parse", "named"),
    [
        (
            with_line(KLD_OUTPUT, "Mean    KLD", "Mean    KLD:        nan ±        nan"),
            parse_kld,
            "kld_mean = nan",
        ),
        (
            with_line(KLD_OUTPUT, "99.0%   KLD", "99.0%   KLD:        inf"),
            parse_kld,
            "KLD 99.0 = inf",
        ),
        (
            with_line(KLD_OUTPUT, "Same top p", "Same top p:    nan ±    nan %"),
            parse_kld,
            "same_top_pct = nan",
        ),
        (
            with_line(BASE_OUTPUT, "Final estimate", "Final estimate: PPL = nan +/- nan"),
            parse_base,
            "perplexity = nan",
        ),
    ],
    ids=["kld_mean", "kld_p99", "same_top", "base_ppl"],
)
def test_a_non_finite_figure_fails_the_step_naming_it(output, parse, named):
    """llama-perplexity exits 0 having printed `nan` (stand-in outputs: the recording with one
    line changed). Before, the nan was a `done` record's figure, read as "not measured"."""
    with pytest.raises(PerplexityError, match=f"printed {re.escape(named)}: no finite figure"):
        parse(output)


def test_a_kld_step_that_read_nan_writes_no_done_record(tmp_path, monkeypatch):
    """The step's record says failed, naming the figure (the rule writes it from the error)."""
    text = tmp_path / "text.txt"
    text.write_text("some text")
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"status": "done", "text_sha256": sha256_bytes(text), "wall_s": 1}))
    manifest = tmp_path / "q4_0.json"
    manifest.write_text(json.dumps({"primary": "q4_0.gguf"}))
    nan_output = with_line(KLD_OUTPUT, "Mean    KLD", "Mean    KLD:        nan ±        nan")
    monkeypatch.setattr(kld, "tool_of", lambda step, stamp: ("llama-perplexity", {}))
    monkeypatch.setattr(kld, "run_tool", lambda argv: (nan_output, 1.0))
    step = KldStep("m", "q4_0", "f16", "e", {}, KldSettings())
    record = tmp_path / "m__q4_0.json"
    with pytest.raises(PerplexityError) as error:
        measure_kld(step, str(text), str(base), "f16.logits", "stamp", str(manifest), str(record))
    assert not record.exists()
    write_failure(step, str(record), tmp_path / "failures", error.value)
    written = json.loads(record.read_text())
    assert written["status"] == "failed" and "kld_mean = nan" in written["reason"]


def test_a_text_too_short_is_refused_with_the_tools_own_words():
    """The tool's complaint, as perplexity.cpp prints it, on a run that then exits 0."""
    head = BASE_OUTPUT.split("perplexity: calculating")[0]
    complaint = (
        "perplexity: you need at least 512 tokens to evaluate perplexity with a context of 256\n"
        "perplexity: the data file you provided tokenizes to only 300 tokens\n"
    )
    with pytest.raises(PerplexityError, match="tokenizes to only 300 tokens"):
        parse_base(head + complaint)


def test_fewer_chunks_than_asked_are_refused():
    with pytest.raises(PerplexityError, match="evaluated 6 chunks of 256 tokens, 8 of 256"):
        check_chunks(BaseFigures(6, 256, 10.0, 0.1), KldSettings(ctx=256, chunks=8))


def test_the_commands_carry_context_chunks_threads_and_the_logits_file():
    settings = KldSettings(ctx=128, chunks=4, threads=1)
    base = base_argv("ppl", "ref.gguf", "text.txt", "ref.logits", settings)
    assert base == [
        *("ppl", "-m", "ref.gguf", "-f", "text.txt", "-c", "128", "--chunks", "4"),
        *("--kl-divergence-base", "ref.logits", "-t", "1"),
    ]
    quant = kld_argv("ppl", "q.gguf", "ref.logits", KldSettings(ctx=128))
    assert quant == ["ppl", "-m", "q.gguf", "-c", "128"] + [
        "--kl-divergence-base",
        "ref.logits",
        "--kl-divergence",
    ]


def test_the_text_is_every_turn_in_order_cut_to_its_length():
    items = [
        {"conversations": [{"from": "gpt", "value": " a1 "}, {"from": "human", "value": "b1"}]},
        {"id": "no turns"},
        {"conversations": [{"from": "human", "value": ""}, {"from": "gpt", "value": "c2xyz"}]},
    ]
    assert conversation_text(items, 8) == "a1\n\nb1\n\n"
    assert conversation_text(items, 11) == "a1\n\nb1\n\nc2x"
    with pytest.raises(PerplexityError, match="hold 13 characters, 40 are needed"):
        conversation_text(items, 40)


def test_a_failed_step_records_why_bumps_its_counter_and_empties_its_logits(tmp_path):
    step = KldStep("m", "f16", "f16", "e", {}, KldSettings())
    logits = tmp_path / "m.logits"
    Path(f"{logits}.partial").write_bytes(b"half")
    write_failure(step, tmp_path / "m.json", tmp_path / "failures", OSError("disk"), str(logits))
    record = json.loads((tmp_path / "m.json").read_text())
    assert record["status"] == "failed" and record["reason"] == "OSError: disk"
    assert record["model"] == "m" and record["reference_quant"] == "f16"
    assert (tmp_path / "failures" / "fidelity-m__f16.count").read_text() == "1\n"
    assert logits.read_bytes() == b"" and not Path(f"{logits}.partial").exists()
    assert KldStep.from_dict(json.loads(json.dumps(step.to_dict()))) == step


def chain_config(reference: str | None) -> dict:
    config = default_config()
    model = config["models"]["smollm2-135m"]
    model["quants"] = smollm2_chain_quants()
    model.pop("reference_quant", None)
    if reference:
        model["reference_quant"] = reference
    return config


def test_each_gguf_quant_a_llamacpp_build_runs_gets_a_step(empty_workdir):
    dag = build_dag(chain_config("f16"))
    assert dag.fidelity_steps.kld_targets() == [
        "results/fidelity/smollm2-135m__q8_0.json",
        "results/fidelity/smollm2-135m__q4_0.json",
    ]
    plan = dag.fidelity_steps.kld["smollm2-135m"]
    assert (plan.engine, plan.settings.threads) == ("llamacpp-cpu", 1)
    inputs = dag.fidelity_steps.fidelity_kld_inputs("smollm2-135m__q4_0")
    assert inputs["weights"] == "results/weights/smollm2-135m__q4_0.json"
    assert inputs["logits"] == "results/fidelity/base/smollm2-135m.logits"
    base = dag.fidelity_steps.fidelity_base_inputs("smollm2-135m")
    assert base["weights"] == "results/weights/smollm2-135m__f16.json"
    assert "smollm2-135m__f16" in dag.weights
    step = json.loads(dag.fidelity_steps.fidelity_step("smollm2-135m", "f16"))
    assert (step["build"]["package"], step["build"]["version"]) == ("llama-cpp-python", "0.3.36")
    assert (step["quant"], step["reference_quant"], step["settings"]["threads"]) == (
        "f16",
        "f16",
        1,
    )
    with pytest.raises(UnknownCell, match="no quant 'q2_k'"):
        dag.fidelity_steps.kld_quant("smollm2-135m__q2_k")


def test_no_step_without_a_gguf_reference_or_a_built_llamacpp(empty_workdir):
    """(Without the default's KL goal: a goal no engine can measure is refused, below.)"""
    # the highest-precision quant by name is bf16, safetensors for vLLM
    config = chain_config(None)
    del config["models"]["smollm2-135m"]["fidelity"]
    assert build_dag(config).fidelity_steps.kld_targets() == []
    # the build makes the quants but runs no cell: a native llama-server does
    config = chain_config("f16")
    del config["models"]["smollm2-135m"]["fidelity"]
    built = {name for name, engine in config["engines"].items() if engine["launch"] == "build"}
    config["engines"]["native"] = {"kind": "llamacpp", "launch": "native", "binary": "x"}
    for entry in config["cells"]:
        engines = entry["matrix"].get("engine", [])
        entry["matrix"]["engine"] = list(
            dict.fromkeys("native" if e in built else e for e in engines)
        )
    dag = build_dag(config)
    assert dag.fidelity_steps.kld_targets() == []
    with pytest.raises(UnknownCell, match="no KL divergence step"):
        dag.fidelity_steps.kld_plan("smollm2-135m")


def test_a_step_that_raises_leaves_a_failed_record_and_its_traceback(tmp_path, capsys):
    """What each KL rule's body runs (kld.recorded): a measurement that raises leaves a failed
    record naming the error, its failure counter bumped, a base step's logits emptied, and the
    traceback in the rule's log (stderr); one that returns leaves nothing of its own."""
    step = KldStep("m", "q8", "f16", "e", {}, KldSettings())
    record, logits = tmp_path / "m__q8.json", tmp_path / "base.logits"
    logits.write_bytes(b"partial")

    def fails():
        raise OSError("llama-perplexity vanished")

    recorded(step, fails, str(record), str(tmp_path / "failures"), logits=str(logits))
    written = json.loads(record.read_text())
    assert written["status"] == "failed" and "llama-perplexity vanished" in written["reason"]
    assert logits.read_bytes() == b""
    assert "OSError: llama-perplexity vanished" in capsys.readouterr().err
    other = tmp_path / "other.json"
    recorded(step, lambda: None, str(other), str(tmp_path / "failures"))
    assert not other.exists()
