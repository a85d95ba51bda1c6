"""The llama-server build: variants and their order, cache keys that carry the CPU features a
native build used, concurrent builds of one key, progress lines, and signals named in words."""

from __future__ import annotations

import json
import multiprocessing
import signal
import time
from pathlib import Path

import pytest

from workflow_scripts.engines import build_llamacpp
from workflow_scripts.engines.build_llamacpp import (
    BuildError,
    LlamaCppBuild,
    build_progress,
    variant_named,
    variants_to_try,
)
from workflow_scripts.engines.cpu_isa import CpuIsa, isa_from_macros, native_isa
from workflow_scripts.exits import describe_exit

ZEN3 = CpuIsa(("avx", "avx2", "bmi2", "f16c", "fma", "sse4_2"), "x86_64")
SAPPHIRE_RAPIDS = CpuIsa(
    ("amx_bf16", "amx_int8", "amx_tile", "avx", "avx2", "avx512f", "avx512vnni", "fma"),
    "x86_64",
)
NEOVERSE = CpuIsa(("arm_feature_dotprod", "arm_neon"), "aarch64")


def _build(variant: str, isa: CpuIsa, flags: tuple[str, ...] = ()) -> LlamaCppBuild:
    chosen = variant_named(variant)
    return LlamaCppBuild(cmake_flags=flags, variant=chosen, isa=isa if chosen.native else None)


def test_a_native_key_changes_with_the_cpu_features_and_a_portable_key_does_not():
    assert _build("native", ZEN3).key != _build("native", SAPPHIRE_RAPIDS).key
    assert _build("portable", ZEN3).key == _build("portable", SAPPHIRE_RAPIDS).key
    # the variant and the user's flags are part of every key
    assert _build("portable", ZEN3).key != _build("baseline", ZEN3).key
    assert _build("portable", ZEN3).key != _build("portable", ZEN3, ("-DGGML_CUDA=ON",)).key
    assert "-native-" in _build("native", ZEN3).key


def test_a_native_key_cannot_be_made_without_the_cpu_features():
    with pytest.raises(ValueError, match="needs the CPU's ISA"):
        _ = LlamaCppBuild(variant=variant_named("native")).key


def test_variants_are_tried_in_the_documented_order_where_they_apply():
    names = lambda isa: [v.name for v in variants_to_try(isa)]  # noqa: E731
    assert names(SAPPHIRE_RAPIDS) == ["native", "native-no-amx", "portable", "baseline"]
    assert names(ZEN3) == ["native", "portable", "baseline"]  # no AMX: nothing to leave out
    assert names(NEOVERSE) == ["native", "portable"]  # the SSE4.2 baseline is x86 only
    assert names(ZEN3) and [v.name for v in variants_to_try(ZEN3, ("portable",))] == ["portable"]


def test_the_no_amx_variant_keeps_the_users_compiler_flags():
    flags = _build("native-no-amx", SAPPHIRE_RAPIDS, ("-DCMAKE_C_FLAGS=-O2",)).all_cmake_flags
    assert "-DCMAKE_C_FLAGS=-O2 -mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in flags
    assert "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in flags
    portable = _build("portable", ZEN3).all_cmake_flags
    assert "-DGGML_NATIVE=OFF" in portable and not any("CMAKE_C_FLAGS" in f for f in portable)


def test_isa_features_come_from_the_compilers_upper_case_feature_macros():
    baseline = {"__SSE2__": "1", "__x86_64__": "1"}
    native = {
        **baseline,
        "__AVX2__": "1",
        "__AMX_TILE__": "1",
        "__znver3__": "1",  # the CPU model: not an ISA feature, must not split keys
        "__tune_znver3__": "1",
        "__BIGGEST_ALIGNMENT__": "32",
    }
    isa = isa_from_macros(baseline, native, "x86_64")
    assert isa.features == ("amx_tile", "avx2", "biggest_alignment=32")
    assert isa.has_amx


def test_this_machines_native_isa_is_read_from_its_compiler():
    isa = native_isa()
    assert isa.features, "a native build adds features over the compiler's baseline"
    assert all(f == f.lower() for f in isa.features)


@pytest.mark.parametrize(
    ("line", "step"),
    [
        ("[57/206] Building CXX object ggml/src/ggml.cpp.o", "57/206"),
        ("[ 45%] Building C object ggml/src/ggml.c.o", "45%"),
        ("-- Configuring done", None),
    ],
)
def test_build_progress_reads_ninja_and_make_lines(line, step):
    assert build_progress(line) == step


def test_exits_are_named_with_their_usual_cause():
    assert describe_exit(-signal.SIGILL).startswith("was killed by SIGILL (illegal instruction")
    assert "out-of-memory killer" in describe_exit(-signal.SIGKILL)
    assert "memory.csv" in describe_exit(-signal.SIGKILL)
    assert "SIGSEGV" in describe_exit(-signal.SIGSEGV)
    assert "SIGABRT" in describe_exit(-signal.SIGABRT)
    assert describe_exit(132).startswith("exited with code 132 (128 + 4: likely SIGILL")
    assert describe_exit(1) == "exited with code 1"


def _fake_build_steps(monkeypatch, tmp_path: Path, fail: bool = False) -> Path:
    """STAND-IN compiler: each 'build' takes a second and counts itself in a file, so a test
    sees how many builds ran (the real one takes minutes)."""
    count_file = tmp_path / "builds"
    sdist = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    sdist.write_bytes(b"not a real sdist")
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build_llamacpp, "fetch_distribution", lambda *a, **k: sdist)

    def extract(_sdist, dest):
        tree = dest / "llama.cpp"
        (tree / "gguf-py").mkdir(parents=True)
        (tree / "convert_hf_to_gguf.py").write_text("# the converter\n")
        return tree

    def step(argv, log, label, progress, env=None):
        if "--build" not in argv:
            return
        with open(count_file, "a") as counter:
            counter.write("build\n")
        time.sleep(1.0)
        if fail:
            raise BuildError("cmake --build was killed by SIGKILL")
        out = Path(argv[argv.index("--build") + 1]) / "bin"
        out.mkdir(parents=True)
        for target in argv[argv.index("--target") + 1 : argv.index("-j")]:
            (out / target).write_text("#!/bin/sh\necho built\n")

    monkeypatch.setattr(build_llamacpp, "_extract_vendor_tree", extract)
    monkeypatch.setattr(build_llamacpp, "_run_step", step)
    return count_file


def _build_in_child(queue) -> None:
    build = _build("portable", ZEN3)
    queue.put(build_llamacpp.build_llama_server(build, progress=lambda _: None))


def test_two_builds_of_one_key_at_once_build_once_and_agree(monkeypatch, tmp_path):
    count_file = _fake_build_steps(monkeypatch, tmp_path)
    context = multiprocessing.get_context("fork")  # children inherit the stand-in build steps
    queue = context.Queue()
    children = [context.Process(target=_build_in_child, args=(queue,)) for _ in range(2)]
    for child in children:
        child.start()
    infos = [queue.get(timeout=60) for _ in children]
    for child in children:
        child.join(30)
        assert child.exitcode == 0
    assert count_file.read_text().count("build") == 1, "the second waited and reused the first"
    assert infos[0] == infos[1]
    binary = Path(infos[0]["binary"])
    assert binary.read_text() == "#!/bin/sh\necho built\n"
    # llama-quantize from the same build, the converter kept beside them
    assert Path(infos[0]["quantize"]) == binary.with_name("llama-quantize")
    assert Path(infos[0]["quantize"]).is_file()
    assert (Path(infos[0]["tree"]) / "convert_hf_to_gguf.py").is_file()
    assert json.loads((binary.parent.parent / "build.json").read_text())["key"] == infos[0]["key"]
    engines = tmp_path / "cache/engines"
    assert [p.name for p in engines.iterdir() if p.name.startswith("build-")] == []
    assert (engines / f"{infos[0]['key']}.lock").exists()  # a lock of its own, not the version's


def test_a_failed_build_leaves_nothing_that_looks_built(monkeypatch, tmp_path):
    _fake_build_steps(monkeypatch, tmp_path, fail=True)
    build = _build("portable", ZEN3)
    with pytest.raises(BuildError, match="SIGKILL"):
        build_llamacpp.build_llama_server(build, progress=lambda _: None)
    assert not build_llamacpp.install_dir(build).exists()
    assert not build_llamacpp.binary_path(build).exists()


def test_a_stamp_made_before_llama_perplexity_completes_its_build_under_the_same_key(
    monkeypatch, tmp_path
):
    """STAND-IN compiler (as above): a cached build of llama-server and llama-quantize only, as
    one made before llama-perplexity was a target, is built again under its key with all three;
    a stamp whose settings make another key is refused."""
    count_file = _fake_build_steps(monkeypatch, tmp_path)
    build = _build("portable", ZEN3)
    first = build_llamacpp.build_llama_server(build, progress=lambda _: None)
    Path(first["perplexity"]).unlink()  # the older build: no llama-perplexity beside the server
    stamp = {k: v for k, v in first.items() if k != "perplexity"}
    settings = {"package": "llama-cpp-python", "version": "0.3.36"}
    tool, info = build_llamacpp.perplexity_of(stamp, settings, lambda: ZEN3)
    assert Path(tool) == build_llamacpp.binary_path(build).with_name("llama-perplexity")
    assert Path(tool).is_file() and info["key"] == stamp["key"]
    assert count_file.read_text().count("build") == 2
    # a stamp that names its tool is used as it is: no build
    assert build_llamacpp.perplexity_of(info, settings, lambda: ZEN3)[0] == tool
    assert count_file.read_text().count("build") == 2
    with pytest.raises(BuildError, match="rerun its engine step"):
        build_llamacpp.perplexity_of(stamp, {**settings, "cmake_flags": ["-DX=1"]}, lambda: ZEN3)
