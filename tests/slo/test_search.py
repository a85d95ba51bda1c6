"""The latency-goal search (workflow_scripts.slo.search; read from the config by
workflow_scripts.config.search): its config refusals (by the schema, or by the cross-checks
after it), and the planner
against known verdict laws, run as the DAG will run it (ask for the next probe, measure it, ask
again): the probes it asks for on a monotone law, min failing, max passing, an unresolved probe
extended then resolved, the extension cap, a fail below a pass flagged, a rate to its
tolerance, and a changed goal re-deciding from the probes already measured."""

from __future__ import annotations

import itertools

import pytest

from tests.slo.configured import search_settings
from tests.support.pipeline import tiny_config, tiny_workload
from tests.support.refusals import names_key
from workflow_scripts.config.matrix import build_searches, validate_config
from workflow_scripts.config.search import goal_of, load_label, probe_part
from workflow_scripts.slo.search import Action, SearchSettings, Step, next_probe
from workflow_scripts.verdicts.verdict import Verdict
from workflow_scripts.vocabulary import ConfigError

P, F, U = Verdict.PASS, Verdict.FAIL, Verdict.UNRESOLVED
GOAL = {"tpot_ms": {"percentile": 90, "max": 52}}


def concurrency(lo=1, hi=64, **extra):
    return search_settings(over="concurrency", min=lo, max=hi, **extra)


def config_of(workload):
    """A config whose one cell runs `workload` (named `w`)."""
    cells = [{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "w"}]
    return tiny_config(cells, workloads={"w": workload})


def searching(search, **beside):
    """Workload `w` with a goal, `search` and what sits `beside` it; a concurrency search has no
    concurrency of its own (it sets each probe's) unless `beside` gives one."""
    workload = tiny_workload(num_prompts=64, slo=GOAL, search=search, **beside)
    if (
        isinstance(search, dict)
        and search.get("over") == "concurrency"
        and "concurrency" not in beside
    ):
        del workload["concurrency"]
    return workload


def threshold(limit):
    """Pass iff the load is at most `limit`, at every extension."""
    return lambda load, extension: P if load <= limit else F


def search(spec, law, verdicts=None):
    """Run the search to its end: (the final plan, the keys it asked for, every verdict)."""
    verdicts = dict(verdicts or {})
    asked = []
    while not (plan := next_probe(spec, verdicts)).done:
        assert plan.key not in verdicts and plan.key not in asked
        assert plan.action == (Action.PROBE if plan.extension == 0 else Action.EXTEND)
        asked.append(plan.key)
        verdicts[plan.key] = law(*plan.key)
        assert len(asked) < 100
    return plan, asked, verdicts


def loads(keys):
    return [load for load, _ in keys]


def test_a_monotone_law_is_doubled_then_bisected():
    plan, asked, _ = search(concurrency(), threshold(11))
    assert loads(asked) == [1, 2, 4, 8, 16, 12, 10, 11]
    assert (plan.largest_passing, plan.smallest_failing) == (11, 12)
    assert len(plan.steps) == 8 and not plan.undecided and not plan.non_monotone
    assert plan.steps[4] == Step(16, 0, F) and not plan.at_max


def test_the_design_notes_toy_law():
    """The checkpoint toy the search was first probed on (TPOT = 10 + 4 x load, limit 52):
    10 / 11 in 8 probes."""
    plan, asked, _ = search(concurrency(), lambda c, _: P if 10 + 4 * c <= 52 else F)
    assert loads(asked) == [1, 2, 4, 8, 16, 12, 10, 11]
    assert (plan.largest_passing, plan.smallest_failing) == (10, 11)


def test_every_threshold_is_found_with_about_log2_probes():
    for limit in range(0, 70):
        plan, asked, _ = search(concurrency(), threshold(limit))
        expected = min(limit, 64) if limit >= 1 else None
        assert plan.largest_passing == expected, limit
        assert plan.smallest_failing == (None if limit >= 64 else max(limit + 1, 1)), limit
        assert len(asked) <= 2 * 7 + 1
        assert all(1 <= load <= 64 and isinstance(load, int) for load in loads(asked))


def test_min_fails():
    plan, asked, _ = search(concurrency(3, 64), threshold(2))
    assert asked == [(3, 0)]
    assert (plan.largest_passing, plan.smallest_failing) == (None, 3)


def test_max_passes_clamped_at_max():
    plan, asked, _ = search(concurrency(3, 40), threshold(1000))
    assert loads(asked) == [3, 6, 12, 24, 40]
    assert (plan.largest_passing, plan.smallest_failing, plan.at_max) == (40, None, True)


def test_min_equal_to_max_is_one_probe():
    plan, asked, _ = search(concurrency(8, 8), threshold(8))
    assert asked == [(8, 0)] and plan.at_max


def test_an_unresolved_probe_is_extended_then_resolved():
    def law(load, extension):
        if load == 12:
            return U if extension == 0 else P
        return threshold(13)(load, extension)

    plan, asked, _ = search(concurrency(), law)
    assert asked == [(1, 0), (2, 0), (4, 0), (8, 0), (16, 0), (12, 0), (12, 1), (14, 0), (13, 0)]
    assert (plan.largest_passing, plan.smallest_failing, plan.undecided) == (13, 14, ())
    partial = next_probe(concurrency(), {k: law(*k) for k in asked[:6]})
    assert (partial.action, partial.key) == (Action.EXTEND, (12, 1))


def test_at_the_extension_cap_a_load_is_not_shown_to_pass():
    """12 stays unresolved through both extensions: the search bisects below it, answers 11,
    keeps 16 as the smallest load seen failing, and lists 12 as undecided."""

    def law(load, extension):
        return U if load == 12 else threshold(13)(load, extension)

    plan, asked, _ = search(concurrency(), law)
    assert asked[5:] == [(12, 0), (12, 1), (12, 2), (10, 0), (11, 0)]
    assert (plan.largest_passing, plan.smallest_failing, plan.undecided) == (11, 16, (12,))
    plan, asked, _ = search(concurrency(max_extensions=0), law)
    assert (12, 1) not in asked and plan.undecided == (12,)


def test_an_unresolved_min_at_the_cap_leaves_no_passing_load():
    plan, asked, _ = search(concurrency(max_extensions=1), lambda *_: U)
    assert asked == [(1, 0), (1, 1)]
    assert (plan.largest_passing, plan.smallest_failing, plan.undecided) == (None, None, (1,))


def test_a_fail_below_a_pass_is_flagged():
    """A walk only probes between its largest pass and smallest fail, so it cannot contradict
    itself; a fail below a pass shows among every measured probe, re-judged under the current
    goal. Here a first goal measured 1..16; under the second, 10 and 11 pass above 6 and 8."""
    _, _, measured = search(concurrency(), threshold(10))
    second = {1, 2, 3, 4, 5, 10, 11}

    def law(load, _extension):
        return P if load in second else F

    plan, asked, _ = search(concurrency(), law, {k: law(*k) for k in measured})
    assert loads(asked) == [6, 5]
    assert (plan.largest_passing, plan.smallest_failing) == (5, 6)
    assert plan.non_monotone == ((10, 6), (10, 8), (11, 6), (11, 8))
    monotone, _, _ = search(concurrency(), threshold(5), {k: threshold(5)(*k) for k in measured})
    assert monotone.non_monotone == ()


def test_a_rate_is_bisected_to_its_tolerance():
    spec = search_settings(over="request_rate", min=0.5, max=16, tolerance=0.05)
    plan, asked, _ = search(spec, threshold(3.3))
    assert loads(asked)[:4] == [0.5, 1.0, 2.0, 4.0]
    lo, hi = plan.largest_passing, plan.smallest_failing
    assert lo <= 3.3 < hi and hi - lo <= 0.05 * hi
    assert all(0.5 <= load <= 16 and isinstance(load, float) for load in loads(asked))
    tight = SearchSettings.from_dict({**spec.to_dict(), "tolerance": 0.001})
    tight_plan, tight_asked, _ = search(tight, threshold(3.3))
    assert len(tight_asked) > len(asked)
    assert tight_plan.smallest_failing - tight_plan.largest_passing <= 0.001 * 3.31
    assert load_label(spec, 2.5) == "r2.5" and probe_part(spec, "w", (2.5, 1)) == "w-r2.5-x1"


def test_the_same_verdicts_give_the_same_plan_and_unwalked_keys_are_ignored():
    spec = concurrency()
    _, asked, verdicts = search(spec, threshold(11))
    half = {k: verdicts[k] for k in asked[:5]}
    assert next_probe(spec, half) == next_probe(spec, dict(half))
    with_extra = {**half, (33, 0): P, (12, 1): F}  # measured once, not on this walk
    assert next_probe(spec, with_extra).key == next_probe(spec, half).key == (12, 0)


@pytest.mark.parametrize(("first", "second"), [(10, 13), (13, 10), (11, 40), (0, 64), (64, 1)])
def test_a_changed_goal_reuses_every_measured_probe_the_new_search_needs(first, second):
    """A changed limit re-judges the probes already measured; the new search asks only for the
    keys its from-scratch walk needs that were not measured, and ends where it would from
    scratch (the same toy: 52 ms then 62 ms ran only c14 and c13)."""
    spec = concurrency()
    _, _, measured = search(spec, threshold(first))
    rejudged = {k: threshold(second)(*k) for k in measured}
    plan, asked, _ = search(spec, threshold(second), rejudged)
    fresh, fresh_asked, _ = search(spec, threshold(second))
    assert set(asked) == set(fresh_asked) - set(measured)
    assert (plan.largest_passing, plan.smallest_failing) == (
        fresh.largest_passing,
        fresh.smallest_failing,
    )
    assert plan.steps == fresh.steps
    if (first, second) == (10, 13):
        assert asked == [(14, 0), (13, 0)]


def test_a_changed_goal_reuses_extensions_too():
    def law(limit, wobbly):
        return lambda load, ext: U if load == wobbly and ext < 2 else threshold(limit)(load, ext)

    spec = concurrency()
    for (l1, w1), (l2, w2) in itertools.product([(11, 12), (13, 12)], [(13, 12), (11, 10)]):
        _, _, measured = search(spec, law(l1, w1))
        rejudged = {k: law(l2, w2)(*k) for k in measured}
        plan, asked, _ = search(spec, law(l2, w2), rejudged)
        fresh, fresh_asked, _ = search(spec, law(l2, w2))
        assert set(asked) == set(fresh_asked) - set(measured)
        assert plan.steps == fresh.steps


def test_extension_prompts_and_probe_names():
    spec = concurrency(extension_factor=1.5)
    assert [spec.prompts_for(64, k) for k in range(3)] == [64, 96, 144]
    assert probe_part(spec, "w", (8, 0)) == "w-c8" and probe_part(spec, "w", (8, 2)) == "w-c8-x2"
    assert spec.to_dict()["max_extensions"] == 2


def test_goal_and_search_together():
    """Read from the validated workload: the goal, the search with the schema's defaults; a
    search without a goal, or with a goal that cannot be run, is refused naming its key."""
    search = {"over": "concurrency", "min": 1, "max": 64}
    workload = validate_config(config_of(searching(search)))["workloads"]["w"]
    slo, spec = goal_of("w", workload)
    assert slo.objectives[0].max_ms == 52 and spec.max == 64
    assert spec == search_settings(**search)  # max_extensions, extension_factor: the schema's
    assert goal_of("w", {"concurrency": 1}) == (None, None)
    no_goal = searching(search)
    del no_goal["slo"]
    with pytest.raises(ConfigError, match=r"'workloads\.w\.search': a search needs a goal"):
        validate_config(config_of(no_goal))
    bad_goal = {**searching(search), "slo": {"tpot_ms": {"percentile": 90, "max": 0}}}
    with pytest.raises(ConfigError, match=r"'workloads\.w\.slo\.tpot_ms\.max'"):
        validate_config(config_of(bad_goal))


RATE = {"over": "request_rate", "min": 0.5, "max": 8, "tolerance": 0.05}
CONC = {"over": "concurrency", "min": 1, "max": 64}


@pytest.mark.parametrize(
    ("entry", "beside", "key"),
    [
        ({**CONC, "over": "num_prompts"}, {}, "search.over"),
        ({"min": 1, "max": 4}, {}, "search.over"),
        ({"over": "concurrency", "max": 4}, {}, "search.min"),
        ({"over": "concurrency", "min": 1}, {}, "search.max"),
        ({**CONC, "min": 0}, {}, "search.min"),
        ({**CONC, "min": 2.5}, {}, "search.min"),
        ({**CONC, "max": 8.0}, {}, "search.max"),
        ({**CONC, "min": True}, {}, "search.min"),
        ({**CONC, "min": 16, "max": 8}, {}, "search.max"),
        ({**CONC, "tolerance": 0.1}, {}, "search.tolerance"),
        ({**RATE, "min": 0}, {}, "search.min"),
        ({**RATE, "min": -1.0}, {}, "search.min"),
        ({**RATE, "max": 0.25}, {}, "search.max"),
        ({k: v for k, v in RATE.items() if k != "tolerance"}, {}, "search.tolerance"),
        ({**RATE, "tolerance": 0}, {}, "search.tolerance"),
        ({**RATE, "tolerance": 1}, {}, "search.tolerance"),
        ({**RATE, "tolerance": "5%"}, {}, "search.tolerance"),
        ({**CONC, "max_extensions": -1}, {}, "search.max_extensions"),
        ({**CONC, "max_extensions": 1.5}, {}, "search.max_extensions"),
        ({**CONC, "extension_factor": 1}, {}, "search.extension_factor"),
        ({**CONC, "step": 2}, {}, "search.step"),
        (CONC, {"concurrency": [1, 2, 4]}, "concurrency"),
        (CONC, {"concurrency": 1, "request_rate": [1.0, 2.0]}, "request_rate"),
        (RATE, {"concurrency": 8, "request_rate": 2.0}, "request_rate"),
        ([1, 64], {}, "search"),
    ],
)
def test_a_search_that_cannot_be_run_is_refused_naming_its_key(entry, beside, key):
    with pytest.raises(ConfigError) as error:
        validate_config(config_of(searching(entry, **beside)))
    assert names_key(str(error.value), f"workloads.w.{key}"), str(error.value)


def test_what_may_sit_beside_a_search():
    """A fixed rate beside a concurrency search, and a concurrency (the cap) beside a rate
    search, are loads a probe keeps."""
    by_concurrency = build_searches(validate_config(config_of(searching(CONC, request_rate=2.0))))
    (search,) = by_concurrency.values()
    assert search.probe((8, 0)).workload_spec.request_rate == 2.0
    by_rate = validate_config(config_of(searching(RATE, concurrency=4, request_rate=None)))
    (search,) = build_searches(by_rate).values()
    probe = search.probe((2.0, 0)).workload_spec
    assert (probe.concurrency, probe.request_rate) == (4, 2.0)
