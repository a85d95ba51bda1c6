"""Asking for a cell the config does not have names the cell, before anything runs: the `cell`
wildcard says only what an id looks like (one alternative per cell made large matrices slow to
plan), so the cell rule's input function checks the id."""

from __future__ import annotations

from tests.support.pipeline import run_snakemake, tiny_config, write_config


def test_a_target_for_an_unknown_cell_is_refused_by_name(tmp_path):
    write_config(
        tmp_path,
        tiny_config([{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"}]),
    )
    typo = "smollm2-135m__llamacpp-cpu__q4_1__none__tiyn"
    proc = run_snakemake(tmp_path, "-n", f"results/cells/{typo}/card.md")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert f"no cell '{typo}' in this config" in output, output[-3000:]
    assert not (tmp_path / "results").exists()
