"""The engine step proves a llama-server build runs before any cell uses it: a smoke test on a
tiny mixed-type model, fallback through the build variants, and one clear reason when none runs.

Stand-ins: `fixtures/engines/crashing_server.py` plays a binary that dies of SIGILL (or
SIGSEGV) at its first decode — a real binary cannot be made to do that on a CPU that runs it —
and a tiny C program compiled here plays a build for instructions this CPU lacks: it executes
one that no CPU has. The builder is replaced by one that hands out those stand-ins for some
variants (and the real llama-server for the others) so a fallback happens in seconds instead of
builds of minutes.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.engines import llama_server_binary, make_config, one_cell, smollm2_gguf
from workflow_scripts.cell.run import CellInputs, run_cell
from workflow_scripts.engines.build_llamacpp import variant_named
from workflow_scripts.engines.cpu_isa import CpuIsa
from workflow_scripts.engines.provision import EngineUnusable, provision_build
from workflow_scripts.engines.smoke import SMOKE_TYPES, matrix_types, smoke_model, smoke_test

CRASHING = Path(__file__).parents[1] / "fixtures/engines/crashing_server.py"
# An x86 CPU with AMX: every variant applies, so the fallback runs through all four.
AMX_CPU = CpuIsa(("amx_int8", "amx_tile", "avx2", "avx512f"), "x86_64")


def crashing(signal_name: str, on: str = "decode") -> list[str]:
    return [sys.executable, str(CRASHING), "--crash-signal", signal_name, "--crash-on", on]


def test_the_smoke_model_has_every_common_weight_type_with_finite_weights():
    from gguf import GGUFReader
    from gguf.quants import dequantize

    types = matrix_types()
    assert set(types.values()) == set(SMOKE_TYPES)
    reader = GGUFReader(smoke_model())
    stored = {t.name: t.tensor_type.name.lower() for t in reader.tensors}
    assert {name: stored[name] for name in types} == types
    for tensor in reader.tensors:
        weights = dequantize(tensor.data, tensor.tensor_type)
        assert np.isfinite(weights).all(), tensor.name
        assert 0 < np.abs(weights).max() < 64, tensor.name


@pytest.mark.standin
@pytest.mark.parametrize(
    ("signal_name", "named"),
    [("ILL", "SIGILL (illegal instruction"), ("SEGV", "SIGSEGV (segmentation fault")],
)
def test_a_binary_that_dies_at_its_first_decode_fails_the_smoke_test(tmp_path, signal_name, named):
    result = smoke_test(crashing(signal_name), {}, tmp_path / "smoke.log")
    assert not result.passed
    assert f"was killed by {named}" in result.reason
    assert "during the smoke test" in result.reason


@pytest.mark.standin
def test_a_binary_that_dies_at_start_fails_before_it_is_ready(tmp_path):
    result = smoke_test(crashing("ILL", on="start"), {}, tmp_path / "smoke.log")
    assert not result.passed
    assert "SIGILL" in result.reason and "before it was ready" in result.reason


def _standin_builder(programs: dict[str, list[str]], tmp_path: Path):
    """STAND-IN builder: 'builds' each variant by writing a launcher for the program given."""

    def build(plan, log_path=None):
        launcher = tmp_path / f"llama-server-{plan.variant.name}"
        program = " ".join(programs[plan.variant.name])
        launcher.write_text(f'#!/bin/sh\nexec {program} "$@"\n')
        launcher.chmod(0o755)
        return {
            "binary": str(launcher),
            "variant": plan.variant.name,
            "key": plan.key,
            "cpu_features": list(plan.cpu_features or []) or None,
        }

    return build


@pytest.mark.standin
def test_when_every_variant_dies_the_engine_has_one_clear_reason_and_no_cell_starts(tmp_path):
    builder = _standin_builder(
        {
            "native": crashing("ILL"),
            "native-no-amx": crashing("ILL"),
            "portable": crashing("SEGV"),
            "baseline": crashing("ABRT"),
        },
        tmp_path,
    )
    with pytest.raises(EngineUnusable) as caught:
        provision_build(
            "cpu", {"build": {}}, str(tmp_path / "engine.log"), builder=builder, isa=AMX_CPU
        )
    message = str(caught.value)
    assert message.startswith("no build variant of llama-server runs on this machine")
    for variant, signal_name in (
        ("native", "SIGILL"),
        ("native-no-amx", "SIGILL"),
        ("portable", "SIGSEGV"),
        ("baseline", "SIGABRT"),
    ):
        assert f"{variant}: server was killed by {signal_name}" in message
    assert [a["outcome"] for a in caught.value.attempts] == ["failed"] * 4
    assert (tmp_path / "cpu.smoke-native.log").exists()  # each variant's server log is kept

    # the engine step writes this as a failed stamp; a cell then fails without a server
    from workflow_scripts.cell.failures import write_failed_stamp

    stamp = tmp_path / "engine.json"
    write_failed_stamp(
        stamp,
        tmp_path / "failures",
        "engine-cpu",
        caught.value,
        {"attempts": caught.value.attempts},
    )
    cell = one_cell(
        make_config(
            {"cpu": {"kind": "llamacpp", "launch": "build"}},
            [{"model": "m", "quant": "q", "engine": "cpu", "workload": "w"}],
        )
    )
    out = tmp_path / "cell"
    result = run_cell(
        CellInputs(
            cell=cell,
            out_dir=out,
            engine_info=json.loads(stamp.read_text()),
            weights_manifest={"primary": "/models/m.gguf"},
        )
    )
    assert result["status"] == "failed"
    assert result["reason"].startswith("RuntimeError: engine unusable: EngineUnusable: no build")
    assert "server_command" not in result  # it never got as far as a command
    assert (out / "server.log").read_text() == "(the server was never started)\n"


@pytest.mark.slow
def test_the_real_build_passes_the_smoke_test(tmp_path):
    result = smoke_test([llama_server_binary()], {"threads": 2}, tmp_path / "smoke.log")
    assert result.passed, result.reason
    assert result.tokens == 16  # 8 tokens on each of the two slots


@pytest.mark.slow
@pytest.mark.standin
def test_fallback_records_each_attempt_and_cells_run_on_the_build_that_passed(tmp_path):
    real = llama_server_binary()
    builder = _standin_builder(
        {
            "native": crashing("ILL"),
            "native-no-amx": crashing("SEGV"),
            "portable": [real],
            "baseline": crashing("ILL"),
        },
        tmp_path,
    )
    info = provision_build(
        "cpu",
        {"build": {}, "settings": {"threads": 2}},
        str(tmp_path / "engine.log"),
        builder=builder,
        isa=AMX_CPU,
    )
    assert info["variant"] == "portable"
    assert [(a["variant"], a["outcome"]) for a in info["attempts"]] == [
        ("native", "failed"),
        ("native-no-amx", "failed"),
        ("portable", "passed"),
    ]
    assert "SIGILL (illegal instruction" in info["attempts"][0]["reason"]
    assert "SIGSEGV" in info["attempts"][1]["reason"]
    assert info["smoke"]["passed"] and info["smoke"]["tokens"] == 16

    config = make_config(
        {"cpu": {"kind": "llamacpp", "launch": "build", "settings": {"threads": 2}}},
        [{"model": "m", "quant": "q", "engine": "cpu", "workload": "w"}],
    )
    cell = one_cell(config)
    gguf = smollm2_gguf(tmp_path)
    result = run_cell(
        CellInputs(
            cell=cell,
            out_dir=tmp_path / "cell",
            engine_info=info,
            weights_manifest={"primary": gguf},
        )
    )
    assert result["status"] == "done", result.get("reason")
    assert result["server_command"][0] == info["binary"]
    assert result["engine_info"]["variant"] == "portable"
    assert result["engine_info"]["attempts"][0]["outcome"] == "failed"


# STAND-IN for a build with instructions this CPU lacks: it runs one instruction that is
# undefined on every CPU of its architecture, so it dies of SIGILL wherever it runs.
TRAPPING_PROGRAM = r"""
int main(void) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("ud2");
#elif defined(__aarch64__)
    __asm__ volatile("udf #0");
#else
#error "no undefined instruction known for this architecture"
#endif
    return 0;
}
"""


def trapping_binary(folder: Path) -> Path:
    """TRAPPING_PROGRAM compiled by this machine's C compiler (a fraction of a second)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler here to make a binary that traps")
    source, binary = folder / "trap.c", folder / "trap"
    source.write_text(TRAPPING_PROGRAM)
    subprocess.run([compiler, "-O0", "-o", str(binary), str(source)], check=True, timeout=120)
    return binary


def test_a_build_that_executes_an_instruction_this_cpu_lacks_is_caught_by_the_smoke_test(
    tmp_path,
):
    """The engine step as it runs (variants, smoke test, verdict) on a binary that dies of SIGILL
    at its first instruction. STAND-IN for the build: a compiled C program made to trap (`ud2`),
    not llama-server built with flags this CPU lacks, which takes a full build (~17 min on two
    cores) to show the same signal."""
    binary = trapping_binary(tmp_path)
    assert subprocess.run([str(binary)], timeout=60).returncode == -signal.SIGILL
    builder = _standin_builder({"portable": [str(binary)]}, tmp_path)
    spec = {"build": {"variants": ["portable"]}, "settings": {"threads": 2}}
    with pytest.raises(EngineUnusable) as caught:
        provision_build("impossible", spec, str(tmp_path / "engine.log"), builder=builder)
    (attempt,) = caught.value.attempts
    assert attempt["variant"] == "portable"
    assert "SIGILL (illegal instruction" in attempt["reason"], attempt["reason"]
    assert str(caught.value).startswith("no build variant of llama-server runs on this machine")


def test_a_native_build_from_another_cpu_is_refused_before_launch(tmp_path):
    """A shared cache or a Slurm login node can hand a cell a native binary built for other
    CPU features: the cell fails with that reason instead of dying of SIGILL."""
    foreign = {
        "binary": "/nonexistent/llama-server",
        "variant": "native",
        "cpu_features": ["avx2", "no_such_feature_anywhere"],
    }
    cell = one_cell(
        make_config(
            {"cpu": {"kind": "llamacpp", "launch": "build"}},
            [{"model": "m", "quant": "q", "engine": "cpu", "workload": "w"}],
        )
    )
    out = tmp_path / "cell"
    result = run_cell(
        CellInputs(
            cell=cell,
            out_dir=out,
            engine_info=foreign,
            weights_manifest={"primary": "/models/m.gguf"},
        )
    )
    assert result["status"] == "failed"
    assert "engine unusable here" in result["reason"]
    assert "no_such_feature_anywhere" in result["reason"] and "build.variants" in result["reason"]
    assert (out / "server.log").read_text() == "(the server was never started)\n"
    assert variant_named("portable").native is False  # portable builds are never refused
    from workflow_scripts.engines.provision import native_build_mismatch

    # another compiler names features its own way: no verdict rather than a false refusal
    assert native_build_mismatch({**foreign, "compiler": "some other cc 1.0"}) is None
    assert native_build_mismatch(foreign) == result["reason"].split("engine unusable here: ")[1]
