"""A latency-goal search in the matrix (workflow_scripts.config.probes, .matrix): the goal and
search checked before anything runs, the key named; a searched series makes no parse-time cell
but a probe cell per (load, extension), built from its id; a probe's settings carry no goal (a
changed goal reruns no measurement); and the walk the summary rule's input function runs.
No stand-ins: pure config and planner code."""

from __future__ import annotations

import copy
import re

import pytest

from tests.support.pipeline import tiny_config, tiny_workload
from tests.support.refusals import names_key
from workflow_scripts.config.matrix import build_cells, build_searches, validate_config
from workflow_scripts.config.probes import probe_of
from workflow_scripts.outputs.search.goals import search_record
from workflow_scripts.outputs.search.outcome import measured_probes, probe_cells
from workflow_scripts.outputs.search.walk import walk
from workflow_scripts.verdicts.verdict import Verdict
from workflow_scripts.vocabulary import ConfigError

SERIES = "smollm2-135m__llamacpp-cpu__q4_1__none__goal"


def goal_workload(**overrides):
    workload = tiny_workload(num_prompts=40)
    del workload["concurrency"]
    workload["slo"] = {"tpot_ms": {"percentile": 90, "max": 50}}
    workload["search"] = {"over": "concurrency", "min": 1, "max": 16}
    workload.update(overrides)
    return workload


def config(**overrides):
    cells = [
        {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"},
        {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "goal"},
    ]
    return tiny_config(
        cells, workloads={"tiny": tiny_workload(), "goal": goal_workload(**overrides)}
    )


@pytest.mark.parametrize(
    ("slo", "key"),
    [
        ({"tpot": {"percentile": 90, "max": 50}}, "workloads.goal.slo.tpot"),
        ({"tpot_ms": {"percentile": 100, "max": 50}}, "workloads.goal.slo.tpot_ms.percentile"),
        ({"tpot_ms": {"percentile": 0, "max": 50}}, "workloads.goal.slo.tpot_ms.percentile"),
        ({"ttft_ms": {"percentile": 99, "max": 0}}, "workloads.goal.slo.ttft_ms.max"),
        ({"ttft_ms": {"percentile": 99, "max": -3}}, "workloads.goal.slo.ttft_ms.max"),
        (
            {"ttft_ms": {"percentile": 99, "max": 9}, "attainment": 1.5},
            "workloads.goal.slo.attainment",
        ),
        (
            {"ttft_ms": {"percentile": 99, "max": 9}, "attainment": 0},
            "workloads.goal.slo.attainment",
        ),
        (  # it can never pass: no finite run shows every request, ever, meets the goal
            {"ttft_ms": {"percentile": 99, "max": 9}, "attainment": 1},
            "workloads.goal.slo.attainment",
        ),
    ],
)
def test_a_bad_goal_is_refused_naming_its_key(slo, key):
    with pytest.raises(ConfigError) as error:
        validate_config(config(slo=slo))
    assert names_key(str(error.value), key), str(error.value)


def test_a_bad_goal_beside_a_fixed_workload_is_refused_too():
    cfg = config()
    cfg["workloads"]["tiny"]["slo"] = {"e2el_ms": {"percentile": 50, "max": "fast"}}
    with pytest.raises(ConfigError, match="'workloads.tiny.slo.e2el_ms.max'"):
        validate_config(cfg)


def test_concurrency_is_refused_beside_a_search_over_it_and_required_without_one():
    with pytest.raises(ConfigError, match="'workloads.goal.concurrency'"):
        validate_config(config(concurrency=4))
    cfg = config()
    del cfg["workloads"]["tiny"]["concurrency"]
    with pytest.raises(ConfigError, match="'workloads.tiny.concurrency': missing"):
        validate_config(cfg)
    cfg = config(search={"over": "request_rate", "min": 1, "max": 8, "tolerance": 0.1})
    with pytest.raises(ConfigError, match="'workloads.goal.concurrency': missing"):
        validate_config(cfg)  # a rate search still needs its concurrency cap


def test_a_search_without_a_goal_is_refused():
    cfg = config()
    del cfg["workloads"]["goal"]["slo"]
    with pytest.raises(ConfigError, match="'workloads.goal.search'"):
        validate_config(cfg)


def test_a_searched_series_makes_no_parse_time_cell_but_probes_by_id():
    cfg = validate_config(config())
    assert [c.id for c in build_cells(cfg)] == ["smollm2-135m__llamacpp-cpu__q4_1__none__tiny"]
    searches = build_searches(cfg)
    assert list(searches) == [SERIES]
    search = searches[SERIES]
    probe = search.probe((8, 1))
    assert probe.id == f"{SERIES}-c8-x1" and probe.workload == "goal-c8-x1"
    assert probe.concurrency == 8 and probe.workload_spec.num_prompts == 80
    assert probe.sweep.series == SERIES and probe.sweep.value == 8
    assert not probe.sweep.shared_server  # each probe starts a server of its own
    assert search.probe((4, 0)).workload_spec.num_prompts == 40
    assert probe_of(searches, f"{SERIES}-c8-x1") == (search, (8, 1))
    assert probe_of(searches, f"{SERIES}-c3") == (search, (3, 0))
    for other in (f"{SERIES}-c08", f"{SERIES}-c17", f"{SERIES}-c4-x3", f"{SERIES}-r2", "x-c1"):
        assert probe_of(searches, other) is None, other


def test_a_probes_settings_carry_no_goal_so_a_changed_goal_reruns_no_measurement():
    one = build_searches(validate_config(config()))[SERIES].probe((4, 0)).to_dict()
    changed = config(slo={"tpot_ms": {"percentile": 90, "max": 80}})
    two = build_searches(validate_config(changed))[SERIES].probe((4, 0)).to_dict()
    assert one == two
    assert "slo" not in repr(one) and "search" not in one["workload_spec"]


def test_a_fixed_workloads_goal_is_no_part_of_its_cells_settings():
    cfg = config()
    plain = build_cells(validate_config(copy.deepcopy(cfg)))[0].to_dict()
    cfg["workloads"]["tiny"]["slo"] = {"ttft_ms": {"percentile": 50, "max": 100}}
    assert build_cells(validate_config(cfg))[0].to_dict() == plain


def test_the_walk_asks_the_law_probe_by_probe_and_stops_at_a_missing_one():
    spec = build_searches(validate_config(config()))[SERIES].settings
    law = {load: Verdict.PASS if load <= 5 else Verdict.FAIL for load in range(1, 17)}
    asked = walk(spec, lambda key: law[key[0]])
    assert asked == [(1, 0), (2, 0), (4, 0), (8, 0), (6, 0), (5, 0)]
    # a probe not judged yet (or failed): the walk ends there, asking for it
    pending = walk(spec, lambda key: None if key[0] == 8 else law[key[0]])
    assert pending == [(1, 0), (2, 0), (4, 0), (8, 0)]


def test_a_load_left_unresolved_is_not_the_search_reaching_its_max():
    """Measured here (the default search, ngram series): c1 passed, c2 stayed unresolved after
    its extension; the table said `c1 (the search's max) passes` until at_max looked at it."""
    from workflow_scripts.slo.search import next_probe

    spec = build_searches(validate_config(config()))[SERIES].settings
    unresolved = Verdict.UNRESOLVED
    verdicts = {(1, 0): Verdict.PASS, **{(2, k): unresolved for k in range(3)}}  # cap: 2
    plan = next_probe(spec, verdicts)
    assert plan.done and plan.largest_passing == 1 and plan.undecided == (2,)
    assert not plan.at_max


# -- search inputs whose answer would be wrong or unreachable -------------------------------------


def test_attainment_one_is_refused_naming_the_value():
    cfg = config(slo={"tpot_ms": {"percentile": 90, "max": 50}, "attainment": 1})
    with pytest.raises(ConfigError, match=r"'workloads\.goal\.slo\.attainment': 1 "):
        validate_config(cfg)


@pytest.mark.parametrize("searching", [False, True], ids=["plain-cell", "searched-series"])
@pytest.mark.parametrize("first", [False, True], ids=["after-the-search", "before-the-search"])
def test_a_cell_with_a_probes_id_is_refused(searching, first):
    """Workload `goal-c8` beside a search of `goal` (1..16) makes a cell (or a searched series)
    whose id is probe c8's: the search would read that cell's result as its probe."""
    cfg = config()
    clash = goal_workload() if searching else tiny_workload()
    cfg["workloads"]["goal-c8"] = clash
    entry = {"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "goal-c8"}
    if first:
        cfg["cells"].insert(0, entry)
    else:
        cfg["cells"].append(entry)
    where = "cells[0]" if first else "cells[2]"
    with pytest.raises(ConfigError) as error:
        build_cells(validate_config(cfg))
    message = str(error.value)
    assert f"config key '{where}'" in message and f"'{SERIES}-c8'" in message, message
    assert "probe c8 of the search of workload 'goal'" in message, message


def test_a_workload_named_like_no_probe_is_accepted():
    cfg = config()
    cfg["workloads"]["goal-c17"] = tiny_workload()  # above the search's max: no probe's id
    cfg["workloads"]["goal-fast"] = tiny_workload()
    for name in ("goal-c17", "goal-fast"):
        cfg["cells"].append({"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": name})
    assert {f"{SERIES}-c17", f"{SERIES}-fast"} <= {c.id for c in build_cells(validate_config(cfg))}


def test_a_search_max_above_the_prompts_a_probe_sends_is_refused():
    """With 40 prompts, a probe at c64 has 40 requests in flight, as c40 has: its answer would
    be the load of c40 under a larger label."""
    with pytest.raises(
        ConfigError, match=r"'workloads\.goal\.search\.max': 64; above num_prompts 40"
    ):
        validate_config(config(search={"over": "concurrency", "min": 1, "max": 64}))
    validate_config(config(search={"over": "concurrency", "min": 1, "max": 40}))
    scaled = goal_workload(search={"over": "concurrency", "min": 1, "max": 64})
    del scaled["num_prompts"]
    scaled["num_prompts_per_concurrency"] = 2  # a probe at c64 sends 128 prompts
    cfg = config()
    cfg["workloads"]["goal"] = scaled
    validate_config(cfg)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("extension_factor", 1e9),
        ("extension_factor", 4.5),
        ("max_extensions", 5),
        ("max_extensions", 1000),
    ],
)
def test_extension_caps_are_refused_past_them(key, value):
    """Without caps, `extension_factor: 1e9` planned a 4e10-prompt probe."""
    search = {"over": "concurrency", "min": 1, "max": 16, key: value}
    with pytest.raises(
        ConfigError, match=rf"'workloads\.goal\.search\.{key}': {re.escape(str(value))} "
    ):
        validate_config(config(search=search))


def test_the_extension_caps_the_schema_states_are_accepted_and_read_as_stated():
    """The caps live in the schema alone; at them, the last run of an unresolved load has
    4^4 = 256 times its first's prompts, the bound docs/slo.md states."""
    from workflow_scripts.config.schema import load_schema

    stated = load_schema()["$defs"]["search"]["properties"]
    caps = {key: stated[key]["maximum"] for key in ("extension_factor", "max_extensions")}
    search = {"over": "concurrency", "min": 1, "max": 16, **caps}
    spec = build_searches(validate_config(config(search=search)))[SERIES].settings
    assert (spec.extension_factor, spec.max_extensions) == tuple(caps.values())
    assert spec.prompts_for(40, spec.max_extensions) == 256 * 40


def rate_config(low):
    return config(
        concurrency=4,
        search={"over": "request_rate", "min": low, "max": 1.0, "tolerance": 0.1},
    )


def test_a_rate_min_whose_probe_id_cannot_be_read_back_is_refused():
    """A rate of 1e-05 is written `r1e-05` in a probe's id, which no id reads back (snakemake -n
    ended in a traceback)."""
    with pytest.raises(ConfigError, match=r"'workloads\.goal\.search\.min': 1e-05; .*r1e-05"):
        validate_config(rate_config(1e-5))


def test_the_smallest_rate_accepted_round_trips_through_its_probe_id():
    from workflow_scripts.config.search import MIN_RATE

    searches = build_searches(validate_config(rate_config(MIN_RATE)))
    search = searches[SERIES]
    for load in (MIN_RATE, search.settings.normal(MIN_RATE * 1.23456789)):
        probe = search.probe_id((load, 1))
        assert probe_of(searches, probe) == (search, (load, 1)), probe


def test_the_end_of_run_lines_and_the_tables_list_a_searchs_probes_by_one_reading(tmp_path):
    """Hand-made cells folder: the probes of the series in load order, whether a walk reaches
    them or not (the tables read every measured one: one off the walk shows a non-monotone
    law); not `c08` (no canonical id), a folder of another series, a file named like a probe,
    or a load beyond the search. The end-of-run lines list each probe folder; the tables each
    probe with both its files."""
    search = build_searches(validate_config(config()))[SERIES]
    cells = tmp_path / "cells"
    for name in ("c8", "c1", "c4-x1", "c4", "c2", "c08", "c32"):
        (cells / f"{SERIES}-{name}").mkdir(parents=True)
    (cells / f"{SERIES}-c16").write_text("")  # a file, not a probe's folder
    (cells / f"{SERIES.replace('q4_1', 'q4_0')}-c2").mkdir()  # another series
    for name in ("c1", "c2", "c4", "c8"):  # c4-x1 has no requests.jsonl yet
        for file in ("metrics.json", "requests.jsonl"):
            (cells / f"{SERIES}-{name}" / file).write_text(
                '{"cell": "x", "status": "done"}' if file == "metrics.json" else ""
            )
    (cells / f"{SERIES}-c4-x1" / "metrics.json").write_text('{"status": "done"}')
    listed = probe_cells(cells, [search])
    assert listed == [f"{SERIES}-{name}" for name in ("c1", "c2", "c4", "c4-x1", "c8")]
    measured = measured_probes(search_record(search), search.settings, cells)
    assert list(measured) == [(1, 0), (2, 0), (4, 0), (8, 0)]
