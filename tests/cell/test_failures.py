"""Failure counters: what bump_failures writes is what the Snakefile's one listing reads back."""

from __future__ import annotations

from workflow_scripts.cell.failures import bump_failures, failure_count, failure_counts


def test_one_listing_reads_every_counter_as_bumped(tmp_path):
    failures = tmp_path / "failures"
    assert failure_counts(failures) == {}  # no run has failed yet: no folder
    bump_failures(failures, "m__e__q4_0__none__w-c8")
    bump_failures(failures, "m__e__q4_0__none__w-c8")
    bump_failures(failures, "engine-llamacpp-cpu")
    (failures / "torn.count").write_text("not a number\n")  # read as none, as failure_count does
    (failures / "notes.txt").write_text("3\n")  # not a counter

    counts = failure_counts(failures)

    assert counts == {"m__e__q4_0__none__w-c8": 2, "engine-llamacpp-cpu": 1}
    assert all(failure_count(failures, key) == n for key, n in counts.items())
    assert failure_count(failures, "torn") == 0
