"""Which cell is compared with which, the reference quant, and the floor runs the matrix adds."""

from __future__ import annotations

import pytest

from tests.support.config import default_config
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.fidelity.pairs import (
    DRAFTER,
    ENGINE,
    FLOOR,
    QUANT,
    fidelity_pairs,
    floor_id,
    floor_of,
    quant_bits,
    reference_quant,
    reference_quants,
)
from workflow_scripts.vocabulary import ConfigError

SMOL = "smollm2-135m"


def cells_and_pairs(config):
    config = validate_config(config)
    cells = build_cells(config)
    return cells, fidelity_pairs(cells, reference_quants(config["models"]))


def test_the_default_compares_quants_drafters_and_engines_with_floors_where_asked():
    cells, pairs = cells_and_pairs(default_config())
    by_cell = {p.cell: p for p in pairs}
    f16 = f"{SMOL}__llamacpp-cpu__f16__none__c4"
    assert by_cell[f"{SMOL}__llamacpp-cpu__q8_0__none__c4"].reference_cell == f16
    assert by_cell[f"{SMOL}__llamacpp-cpu__q4_0__none__c4"].kind == QUANT
    assert by_cell[f"{SMOL}__vllm-cpu__bf16__none__c4"] == type(pairs[0])(
        f"{SMOL}__vllm-cpu__bf16__none__c4", f16, ENGINE
    )
    for c in (1, 2, 4, 8):
        point = by_cell[f"{SMOL}__llamacpp-cpu__q4_0__ngram__sweep-c{c}"]
        assert point.kind == DRAFTER
        assert point.reference_cell == f"{SMOL}__llamacpp-cpu__q4_0__none__sweep-c{c}"
    floors = {p.reference_cell for p in pairs if p.kind == FLOOR}
    # the llama.cpp entries say fidelity_floor: true, vLLM's does not
    assert f"{SMOL}__vllm-cpu__bf16__none__c4" not in floors
    assert f16 in floors and f"{SMOL}__llamacpp-cpu__q4_0__none__sweep-c8" in floors
    ids = [c.id for c in cells]
    assert ids[ids.index(f16) + 1] == floor_id(f16)  # right after its reference
    floor_points = [c for c in cells if floor_of(c.id) and c.sweep]
    assert {c.sweep.series for c in floor_points} == {
        f"{SMOL}__llamacpp-cpu__q4_0__none__sweep__floor"
    }
    # no pair for the model compared with nothing, nor for a floor run
    assert not any(p.cell.startswith("gemma3") for p in pairs)
    assert not any(floor_of(p.cell) for p in pairs if p.kind != FLOOR)


@pytest.mark.parametrize(
    ("quants", "expected"),
    [
        (["q4_1", "bf16", "f16", "q8_0"], "bf16"),  # equal bits: the first listed
        (["q4_k_m", "Q8_0", "iq2_xs"], "Q8_0"),
        (["nvfp4", "fp8"], "fp8"),
        (["awq"], "awq"),
    ],
)
def test_the_reference_quant_defaults_to_the_most_bits(quants, expected):
    assert reference_quant({"quants": dict.fromkeys(quants, {})}) == expected
    assert (
        reference_quant({"quants": dict.fromkeys(quants, {}), "reference_quant": quants[-1]})
        == (quants[-1])
    )
    assert quant_bits("iq2_xs") == 2 and quant_bits("mxfp4") == 4 and quant_bits("f32") == 32


def test_no_floor_run_where_repeats_already_measure_it():
    """(A floor run beside `record_outputs: false` is refused: tests/config/test_fidelity.py.)"""
    config = default_config()
    config["workloads"]["c4"]["repeats"] = 2
    config["workloads"]["sweep"]["repeats"] = 2
    cells, pairs = cells_and_pairs(config)
    assert not [c.id for c in cells if floor_of(c.id)]
    assert not [p for p in pairs if p.kind == FLOOR]
    assert any(p.kind == QUANT for p in pairs)


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (
            lambda c: c["models"][SMOL].update(reference_quant="f17"),
            f"models.{SMOL}.reference_quant",
        ),
        (lambda c: c["models"][SMOL].update(fidelity={"kld_mean": {"min": 1}}), "kld_mean"),
        (lambda c: c.update(fidelity={"same_top_pct": {"min": 101}}), "same_top_pct"),
        (lambda c: c.update(fidelity={}), "fidelity"),
        (lambda c: c["cells"][0].update(fidelity_floor="yes"), "fidelity_floor"),
    ],
)
def test_bad_fidelity_keys_are_refused_naming_the_key(mutate, key):
    config = default_config()
    mutate(config)
    with pytest.raises(ConfigError, match=key):
        validate_config(config) and build_cells(validate_config(config))
