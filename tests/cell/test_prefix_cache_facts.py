"""metrics.json's `prefix_cache` and `engine_setup_sha256` (cell.attempts.prefix_cache_facts),
read through the real llama.cpp, vLLM and SGLang adapters on cells of a written config
(tests/support/content_matrix.py): the cache is off exactly where the adapter's
`prefix_cache_off` settings hold, and two engine setups share a digest when they differ in
those settings (or their entry's name) alone."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.support.config import REPO
from tests.support.content_matrix import cell_id, content_cells
from workflow_scripts.cell.attempts import prefix_cache_facts
from workflow_scripts.config.matrix import load_cells
from workflow_scripts.engines import adapter_for
from workflow_scripts.outputs.cell_pairs import PREFIX_CACHE, pair_axis
from workflow_scripts.vocabulary import Cell, identity

# (engine entry with the cache on, the same entry with it off, adapter kind)
PAIRS = [("lc", "lc-off", "llamacpp"), ("vl", "vl-off", "vllm"), ("sg", "sg-off", "sglang")]


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    return content_cells(tmp_path_factory.mktemp("prefix-cache"))


def with_engine(cell: Cell, **changes: Any) -> Cell:
    """The cell on its engine entry with `changes` over it (`settings` merged in), same name."""
    settings = {**cell.engine_spec.get("settings", {}), **changes.pop("settings", {})}
    return dataclasses.replace(
        cell, engine_spec={**cell.engine_spec, **changes, "settings": settings}
    )


def chat_cell(cells, engine: str) -> Cell:
    return cells[cell_id(engine, "none", "chat")]


@pytest.mark.parametrize(("on", "off", "kind"), PAIRS)
def test_the_cache_is_off_exactly_where_the_adapters_settings_hold(cells, on, off, kind):
    adapter = adapter_for(kind)
    assert adapter.prefix_cache_off, kind  # each of these engines can turn its cache off
    cell = chat_cell(cells, on)
    assert prefix_cache_facts(cell, adapter)["prefix_cache"] == "on"
    turned_off = with_engine(cell, settings=adapter.prefix_cache_off)
    assert prefix_cache_facts(turned_off, adapter)["prefix_cache"] == "off"
    assert prefix_cache_facts(chat_cell(cells, off), adapter)["prefix_cache"] == "off"
    if len(adapter.prefix_cache_off) > 1:  # llama.cpp: every one of its settings, not some
        key, value = next(iter(adapter.prefix_cache_off.items()))
        part = with_engine(cell, settings={key: value})
        assert prefix_cache_facts(part, adapter)["prefix_cache"] == "on"


@pytest.mark.parametrize(("on", "off", "kind"), PAIRS)
def test_the_cache_settings_alone_leave_the_digest_as_it_was(cells, on, off, kind):
    adapter = adapter_for(kind)
    cell = chat_cell(cells, on)
    facts = prefix_cache_facts(cell, adapter)
    assert facts == prefix_cache_facts(cell, adapter)  # a pure function of the cell
    turned_off = prefix_cache_facts(with_engine(cell, settings=adapter.prefix_cache_off), adapter)
    assert turned_off["engine_setup_sha256"] == facts["engine_setup_sha256"]
    assert turned_off["prefix_cache"] != facts["prefix_cache"]
    # the settings' order is no difference
    reordered = dict(reversed(list(cell.engine_spec["settings"].items())))
    shuffled = dataclasses.replace(cell, engine_spec={**cell.engine_spec, "settings": reordered})
    assert list(reordered) != list(cell.engine_spec["settings"])
    assert prefix_cache_facts(shuffled, adapter) == facts
    # nor is the entry's name (its key under `engines`)
    assert prefix_cache_facts(with_engine(cell, name=f"{on}-renamed"), adapter) == facts


def _other_setups(cell: Cell, adapter) -> dict[str, Cell]:
    """The cell's engine changed in one thing other than its cache, each way it can be."""
    first, value = next(iter(cell.engine_spec["settings"].items()))
    return {
        "a setting's value": with_engine(cell, settings={first: value * 2}),
        "one more setting": with_engine(cell, settings={"seed": 7}),
        "an environment variable": with_engine(cell, env={"OMP_NUM_THREADS": "1"}),
        "extra arguments": with_engine(cell, extra_args=["--verbose"]),
        "the binary": with_engine(cell, binary="/opt/other/server"),
        "the cache off and another setting": with_engine(
            cell, settings={**adapter.prefix_cache_off, first: value * 2}
        ),
    }


@pytest.mark.parametrize(("on", "off", "kind"), PAIRS)
def test_any_other_engine_difference_changes_the_digest(cells, on, off, kind):
    adapter = adapter_for(kind)
    cell = chat_cell(cells, on)
    digest = prefix_cache_facts(cell, adapter)["engine_setup_sha256"]
    others = {
        what: prefix_cache_facts(other, adapter)["engine_setup_sha256"]
        for what, other in _other_setups(cell, adapter).items()
    }
    assert {what for what, other in others.items() if other == digest} == set()


@pytest.mark.parametrize(("on", "off", "kind"), PAIRS)
def test_two_entries_that_differ_only_in_the_cache_share_a_digest(cells, on, off, kind):
    adapter = adapter_for(kind)
    a = prefix_cache_facts(chat_cell(cells, on), adapter)
    b = prefix_cache_facts(chat_cell(cells, off), adapter)
    assert (a["prefix_cache"], b["prefix_cache"]) == ("on", "off")
    assert a["engine_setup_sha256"] == b["engine_setup_sha256"]


def test_the_defaults_cache_on_and_off_cells_compare_as_a_prefix_cache_pair():
    """The default config's conversation cells on `llamacpp-cpu` and `llamacpp-cpu-nocache`:
    their metrics.json facts make comparisons.md's `prefix cache` pair."""
    conversation = [c for c in load_cells(REPO / "config.yaml") if c.workload == "chat"]
    assert len({c.engine for c in conversation}) == 2
    a, b = (
        {**identity(c), **prefix_cache_facts(c, adapter_for(c.engine_spec["kind"]))}
        for c in conversation
    )
    assert pair_axis(a, b) == PREFIX_CACHE
