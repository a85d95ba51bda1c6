"""A sweep in the config: a list in `concurrency` or `request_rate` -> one cell per point, and the
inputs that would make a sweep ambiguous refused before anything runs, naming the key."""

from __future__ import annotations

import pytest

from tests.support.config import default_config
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.config.resources import resources_by_cell
from workflow_scripts.config.sweeps import (
    launch_cell,
    point_part,
    point_value,
    series_resources,
    shared_series,
)
from workflow_scripts.vocabulary import ConfigError


def sweep_config(**workload) -> dict:
    config = default_config()
    config["workloads"]["w"] = {**config["workloads"]["c4"], **workload}
    config["cells"] = [
        {
            "matrix": {
                "model": ["smollm2-135m"],
                "quant": ["q4_0"],
                "engine": ["llamacpp-cpu"],
                "drafter": ["none", "ngram"],
                "workload": ["w"],
            }
        }
    ]
    return config


def cells_of(config: dict):
    return build_cells(validate_config(config))


def test_a_concurrency_list_makes_a_cell_per_point_named_by_its_value():
    cells = cells_of(sweep_config(concurrency=[1, 8, 2]))
    assert [c.id for c in cells] == [
        f"smollm2-135m__llamacpp-cpu__q4_0__{d}__w-c{c}"
        for d in ("none", "ngram")
        for c in (1, 8, 2)
    ]
    c8 = cells[1]
    assert c8.concurrency == 8 and c8.workload == "w-c8"
    assert c8.sweep.series == "smollm2-135m__llamacpp-cpu__q4_0__none__w"
    assert (c8.sweep.axis, c8.sweep.value, c8.sweep.workload) == ("concurrency", 8, "w")
    # a shared server runs without its prefix cache: no point re-serves an earlier one's prompts
    assert c8.engine_spec["settings"]["cache_prompt"] is False
    assert c8.engine_spec["settings"]["cache_ram"] == 0
    # the series' server is started for its heaviest point, its points run lightest first
    series = shared_series(cells)
    assert [p.id for p in series[c8.sweep.series]] == [cells[0].id, cells[2].id, c8.id]
    assert launch_cell(series[c8.sweep.series]).id == c8.id


def test_a_rate_list_makes_a_point_per_rate_at_the_workloads_concurrency():
    cells = cells_of(sweep_config(request_rate=[0.5, 2, 2.5]))
    assert [c.workload for c in cells[:3]] == ["w-r0.5", "w-r2", "w-r2.5"]
    assert [c.workload_spec.request_rate for c in cells[:3]] == [0.5, 2.0, 2.5]
    assert {c.concurrency for c in cells} == {4}


def test_adding_a_point_changes_no_other_point():
    before = {c.id: c.to_dict() for c in cells_of(sweep_config(concurrency=[1, 4]))}
    after = {c.id: c.to_dict() for c in cells_of(sweep_config(concurrency=[1, 2, 4, 16]))}
    assert set(before) < set(after)
    assert all(after[cell] == settings for cell, settings in before.items())


def test_prompts_and_warmups_scale_with_each_points_concurrency():
    config = sweep_config(concurrency=[1, 4])
    del config["workloads"]["w"]["num_prompts"], config["workloads"]["w"]["warmup_requests"]
    config["workloads"]["w"].update(num_prompts_per_concurrency=10, warmup_per_concurrency=2)
    c1, c4 = cells_of(config)[:2]
    assert (c1.workload_spec.num_prompts, c1.workload_spec.warmup_requests) == (10, 2)
    assert (c4.workload_spec.num_prompts, c4.workload_spec.warmup_requests) == (40, 8)


def test_repeats_apply_per_point_each_repeat_its_own_series():
    cells = cells_of(sweep_config(concurrency=[1, 2], repeats=2))
    ids = [c.id for c in cells if c.drafter == "none"]
    assert ids == [
        "smollm2-135m__llamacpp-cpu__q4_0__none__w-c1",
        "smollm2-135m__llamacpp-cpu__q4_0__none__w-c1__r2",
        "smollm2-135m__llamacpp-cpu__q4_0__none__w-c2",
        "smollm2-135m__llamacpp-cpu__q4_0__none__w-c2__r2",
    ]
    assert len(shared_series(cells)) == 4  # 2 drafters x 2 repeats, each its own server start


def test_a_fresh_server_per_point_when_asked():
    cells = cells_of(sweep_config(concurrency=[1, 2], share_server=False))
    assert shared_series(cells) == {}
    assert "cache_prompt" not in cells[0].engine_spec["settings"]


def test_a_shared_series_asks_for_the_machine_once():
    config = sweep_config(concurrency=[1, 2, 4])
    config["resources"] = {"gpu": 1, "runtime": 30, "cpus_per_task": 4}
    validated = validate_config(config)
    cells = build_cells(validated)
    by_cell, servers = series_resources(shared_series(cells), resources_by_cell(validated))
    (server, _) = servers.values()
    assert (server["gpu"], server["runtime"], server["cpus_per_task"], server["machine"]) == (
        1,
        90,
        4,
        1,
    )
    assert {by_cell[c.id]["gpu"] for c in cells} == {0}
    assert {by_cell[c.id]["machine"] for c in cells} == {0}


@pytest.mark.parametrize(
    "workload,key,words",
    [
        ({"concurrency": []}, "workloads.w.concurrency", "should be non-empty"),
        ({"concurrency": [1, 2, 2]}, "workloads.w.concurrency", "non-unique"),
        ({"concurrency": [1, 0]}, "workloads.w.concurrency[1]", "less than the minimum of 1"),
        ({"concurrency": [2, -4]}, "workloads.w.concurrency[1]", "less than the minimum"),
        ({"request_rate": [1.0, 0]}, "workloads.w.request_rate[1]", "less than or equal to"),
        ({"request_rate": []}, "workloads.w.request_rate", "should be non-empty"),
        (
            {"concurrency": [1, 2], "request_rate": [1, 2]},
            "workloads.w.request_rate",
            "both lists",
        ),
        (
            {"concurrency": [1, 2], "num_prompts_per_concurrency": 10},
            "workloads.w.num_prompts_per_concurrency",
            "beside a fixed num_prompts",
        ),
        (
            {"concurrency": [1, 2], "warmup_per_concurrency": 2},
            "workloads.w.warmup_per_concurrency",
            "beside a fixed warmup_requests",
        ),
    ],
)
def test_a_bad_sweep_is_refused_naming_the_key(workload, key, words):
    with pytest.raises(ConfigError) as error:
        cells_of(sweep_config(**workload))
    assert f"'{key}'" in str(error.value) and words in str(error.value)


def test_a_workload_without_a_prompt_count_is_refused():
    config = sweep_config(concurrency=[1, 2])
    del config["workloads"]["w"]["num_prompts"]
    with pytest.raises(ConfigError, match=r"'workloads\.w\.num_prompts': missing"):
        cells_of(config)


def test_a_point_colliding_with_another_workloads_cell_is_refused():
    config = sweep_config(concurrency=[4, 8])
    config["workloads"]["w-c8"] = config["workloads"]["c4"]
    config["cells"].append(
        {"model": "smollm2-135m", "quant": "q4_0", "engine": "llamacpp-cpu", "workload": "w-c8"}
    )
    with pytest.raises(ConfigError, match="duplicate cell id"):
        cells_of(config)


@pytest.mark.parametrize(
    ("axis", "value", "part", "typed"),
    [
        ("concurrency", 8, "c8", 8),
        ("concurrency", 8.0, "c8", 8),
        ("request_rate", 2.5, "r2.5", 2.5),
        ("request_rate", 10.0, "r10", 10.0),
        ("request_rate", 2_000_000.0, "r2000000", 2_000_000.0),
    ],
)
def test_a_point_has_one_name_with_or_without_its_workload_and_one_typed_value(
    axis, value, part, typed
):
    assert point_part("w", axis, value) == f"w-{part}"
    assert point_part("", axis, value) == part
    assert point_value(axis, value) == typed
    assert type(point_value(axis, value)) is type(typed)
