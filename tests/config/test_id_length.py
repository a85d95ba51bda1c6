"""A cell id the file system cannot name is refused at plan time, naming the `cells` entry, the
id's length and the limit: every file named after an id (its folder, `<id>.count`,
`<id>.log`, a shared series' `.<id>.launch.json.XXXXXXXX.tmp` while it is written) must fit in
NAME_MAX, 255 bytes. The floor run (`<cell>__floor`), a sweep's points (`w-c1000`) and a
search's probes (`w-c64-x2`, `w-r0.000123457`) are ids of their own. The limit is shown exact
on this machine's file system: the real writers take an id of the longest length allowed and
fail on one byte more."""

from __future__ import annotations

import errno
import os

import pytest

from tests.support.pipeline import tiny_config, tiny_workload
from workflow_scripts.cell.failures import bump_failures
from workflow_scripts.cell.series import write_series_files
from workflow_scripts.config.checks import ID_NAME_ROOM, NAME_MAX_BYTES
from workflow_scripts.config.matrix import build_matrix, validate_config
from workflow_scripts.vocabulary import ConfigError

LONGEST = NAME_MAX_BYTES - ID_NAME_ROOM  # 229
PREFIX = "smollm2-135m__llamacpp-cpu__q4_1__none__"  # the cell id before its workload part


def config_with(workload: str) -> dict:
    """One cell of workload `workload` (its name sets the id's length)."""
    cell = {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": workload}
    return tiny_config([cell], workloads={workload: tiny_workload()})


def named(length: int, tail: str = "") -> str:
    """A workload name giving the cell id `length` bytes once `tail` is added to it (not
    periodic: Snakemake refuses a wildcard that is)."""
    return "w" * (length - len(PREFIX) - len(tail) - 1) + "z"


def refused(config: dict) -> str:
    with pytest.raises(ConfigError) as error:
        build_matrix(validate_config(config))
    return str(error.value)


def test_the_longest_id_is_planned_and_one_byte_more_refused_naming_the_entry():
    (cell,) = build_matrix(validate_config(config_with(named(LONGEST)))).cells
    assert len(cell.id) == LONGEST
    said = refused(config_with(named(LONGEST + 1)))
    assert said.startswith(f"config key 'cells[0]': cell id '{PREFIX}ww")
    assert f"is {LONGEST + 1} bytes" in said and f"at most {NAME_MAX_BYTES}" in said
    assert f"an id may be at most {LONGEST} bytes" in said


def test_a_floor_run_a_sweep_point_and_a_probe_are_ids_of_their_own():
    # the floor run of the base cell: `__floor` past the limit, the cell itself within it
    name = named(LONGEST + 1, "__floor")
    floor = config_with(name)
    floor["cells"] = [
        {
            "matrix": {
                "model": ["smollm2-135m"],
                "engine": ["llamacpp-cpu"],
                "drafter": ["none", "ngram"],
                "workload": [name],
            },
            "fidelity_floor": True,
        }
    ]
    said = refused(floor)
    assert "config key 'cells[0]'" in said and f"{PREFIX}{name}__floor'" in said
    # a sweep point: `-c1000` past the limit
    name = named(LONGEST + 1, "-c1000")
    sweep = config_with(name)
    sweep["workloads"][name]["concurrency"] = [1, 1000]
    sweep["workloads"][name]["num_prompts"] = 1000
    assert f"{PREFIX}{name}-c1000'" in refused(sweep)
    # a probe at the search's max with every extension: `-c64-x2` past the limit
    name = named(LONGEST + 1, "-c64-x2")
    search = config_with(name)
    workload = search["workloads"][name]
    del workload["concurrency"]
    workload.update(
        num_prompts=64,
        slo={"tpot_ms": {"percentile": 90, "max": 50}},
        search={"over": "concurrency", "min": 1, "max": 64, "max_extensions": 2},
    )
    said = refused(search)
    assert said.startswith(f"config key 'cells[0]': a probe's id '{PREFIX}{name}-c64-x2'")
    # a rate search's midpoints may be written longer than its max: six digits from 1e-4
    workload["concurrency"] = 4
    workload["search"] = {"over": "request_rate", "min": 0.0001, "max": 1, "tolerance": 0.01}
    workload["search"]["max_extensions"] = 2
    assert f"{PREFIX}{name}-r0.000123457-x2'" in refused(search)


@pytest.fixture
def name_max(tmp_path) -> int:
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    if limit != NAME_MAX_BYTES:
        pytest.skip(f"this file system's NAME_MAX is {limit}, not {NAME_MAX_BYTES}")
    return limit


def test_the_room_is_what_the_writers_add_to_an_id(tmp_path, name_max):
    """The series' launch file and a failure counter, written atomically as the pipeline writes
    them: an id of LONGEST bytes fits; one byte more is refused by the file system."""
    fits = "s" * LONGEST
    write_series_files(tmp_path / "cells", {fits: {"id": fits}})
    assert bump_failures(tmp_path / "failures", fits) == 1
    over = "s" * (LONGEST + 1)
    with pytest.raises(OSError) as error:
        write_series_files(tmp_path / "cells", {over: {"id": over}})
    assert error.value.errno == errno.ENAMETOOLONG
