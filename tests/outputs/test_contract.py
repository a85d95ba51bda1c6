"""The output contract (docs/outputs.md) stays put: summary.csv and spec_gain.csv as the aggregation
code writes them from the result fixtures have the columns and cells that
tests/fixtures/contract/contract.json recorded before the restructuring of issue #17 (the
metrics.json side is checked on a real cell's output, in test_machine_use.py)."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.contract.make_contract import HERE, table_shape
from tests.support.outputs import fixture_tables

CONTRACT = json.loads((HERE / "contract.json").read_text())


@pytest.mark.parametrize("table", ["summary", "spec_gain"])
def test_tables_keep_their_columns_and_cells(tmp_path, table):
    assert table_shape(fixture_tables(tmp_path)[table]) == CONTRACT[f"{table}_csv"]
