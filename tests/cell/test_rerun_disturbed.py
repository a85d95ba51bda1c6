"""A disturbed measurement is measured again (`checks.rerun_disturbed`, workflow_scripts.cell.run):
the loop on attempts made by hand, the key in the schema, then a whole run_cell on the STAND-IN
law server (`fixtures/sweeps/law_server.py`: a real server process with a known law, no model)
where a STAND-IN interference judgement (cell.attempts' `interference`, replaced) calls the first
attempt disturbed: a busy process planted on this shared 2-core machine could not be kept from
disturbing the second attempt too, and whether the real judgement sees a busy loop is
tests/process/test_machine_use.py's."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.sweeps.law import SERVER, Law
from tests.support.engines import left_behind
from tests.support.pipeline import tiny_config, tiny_workload
from workflow_scripts.cell import attempts as cell_attempts
from workflow_scripts.cell import run as cell_run
from workflow_scripts.config.matrix import build_cells, validate_config
from workflow_scripts.config.schema import load_schema
from workflow_scripts.loadgen.client import LoadResult
from workflow_scripts.process import machine_use as mu
from workflow_scripts.vocabulary import ConfigError


def judged(other_cpu_pct: float) -> dict:
    """The interference of a bench of 10 s in which other work used `other_cpu_pct` % of a core
    (the real judgement on hand-made snapshots, default thresholds)."""
    start = mu.UseSnapshot(0.0, 0.0, (), ())
    end = mu.UseSnapshot(10.0, other_cpu_pct / 10.0, (), ())
    return mu.interference(start, end)


def attempts(*other_cpu_pct: float, died_at: int | None = None):
    """A stand-in attempt: each call returns the next of the given benches (no load ran)."""
    made: list[cell_attempts.Attempt] = []

    def attempt() -> cell_attempts.Attempt:
        n = len(made)
        load = LoadResult([], False, 0, 0.0, 1.0)
        died = "the server died" if died_at == n + 1 else None
        made.append(cell_attempts.Attempt(load, died, judged(other_cpu_pct[n])))
        return made[-1]

    return attempt, made


@pytest.mark.standin
def test_a_disturbed_first_attempt_is_measured_again_and_the_second_kept():
    attempt, made = attempts(107.0, 3.0, 3.0)
    kept, discarded = cell_attempts.measure_until_undisturbed(attempt, 2, "cell")
    assert len(made) == 2 and kept is made[1] and not kept.disturbed
    assert [d["attempt"] for d in discarded] == [1]
    assert discarded[0]["interference"]["other_cpu_percent_of_core"] == pytest.approx(107.0)
    assert discarded[0]["interference"]["flagged"] is True


@pytest.mark.standin
def test_every_attempt_disturbed_ends_after_n_plus_one_and_keeps_the_last_as_disturbed():
    attempt, made = attempts(50.0, 60.0, 70.0, 80.0)
    kept, discarded = cell_attempts.measure_until_undisturbed(attempt, 2, "cell")
    assert len(made) == 3 and kept is made[2] and kept.disturbed
    assert [d["attempt"] for d in discarded] == [1, 2]
    metrics = {"interference": kept.interference, mu.DISTURBED_ATTEMPTS: discarded}
    assert mu.disturbed(metrics)
    assert "measured 3 times, disturbed each time" in mu.attempts_note(metrics)


@pytest.mark.standin
def test_no_rerun_by_default_and_none_after_a_server_death():
    attempt, made = attempts(107.0, 3.0)
    kept, discarded = cell_attempts.measure_until_undisturbed(attempt, 0, "cell")
    assert len(made) == 1 and kept.disturbed and discarded == []
    attempt, made = attempts(107.0, 3.0, died_at=1)
    kept, discarded = cell_attempts.measure_until_undisturbed(attempt, 3, "cell")
    assert len(made) == 1 and kept.died and discarded == []


def test_rerun_disturbed_is_in_the_schema_and_bad_values_are_refused_by_key():
    schema = load_schema()["properties"]["checks"]["properties"]["rerun_disturbed"]
    assert schema["default"] == mu.Thresholds().rerun_disturbed == 0
    plain = tiny_config([{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"}])
    config = validate_config({**plain, "checks": {"rerun_disturbed": 2}})
    assert mu.Thresholds.from_config(config["checks"]).rerun_disturbed == 2
    for bad in (-1, 1.5, "2", 11):
        with pytest.raises(ConfigError, match=r"checks\.rerun_disturbed"):
            validate_config({**plain, "checks": {"rerun_disturbed": bad}})
    # like the thresholds, it never reaches a cell's settings (editing it reruns nothing)
    cells = [build_cells(validate_config(c))[0].to_dict() for c in (plain, config)]
    assert cells[0] == cells[1]


def law_cell_disturbed_once(tmp_path, monkeypatch, settings: dict):
    """A cell on the law server (a native llamacpp engine with `settings`) whose cell.run
    `interference` is replaced by one that calls the first bench disturbed (107 % of a core of
    other work) and the others quiet; returns its inputs and the list of benches judged."""
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(4)))
    workload = tiny_workload(
        dataset={"kind": "jsonl", "path": str(data)}, num_prompts=4, max_tokens=4
    )
    config = tiny_config(
        [{"model": "smollm2-135m", "engine": "law", "workload": "tiny"}],
        workloads={"tiny": workload},
    )
    engine = Law(step_ms=2, step_per_stream_ms=1).engine()
    engine["settings"] = {**engine.get("settings", {}), **settings}
    config["engines"] = {"law": engine}
    (cell,) = build_cells(validate_config(config))
    benches: list[float] = []
    real = cell_attempts.interference

    def standin(start, end, samples, thresholds):
        found = real(start, end, samples, thresholds)
        benches.append(start.t_s)
        other = 107.0 if len(benches) == 1 else 0.0
        return {**found, "other_cpu_percent_of_core": other, "flagged": other >= 25}

    monkeypatch.setattr(cell_attempts, "interference", standin)
    weights = tmp_path / "m.gguf"
    weights.write_bytes(b"GGUF")
    inputs = cell_run.CellInputs(
        cell,
        tmp_path / "cell",
        {},
        {"primary": str(weights)},
        thresholds=mu.Thresholds(rerun_disturbed=2),
    )
    return inputs, benches


@pytest.mark.standin
def test_run_cell_measures_a_disturbed_cell_again_on_the_same_server(tmp_path, monkeypatch):
    """Its server's prefix cache off (as every sweep point's shared server has it)."""
    inputs, benches = law_cell_disturbed_once(
        tmp_path, monkeypatch, {"cache_prompt": False, "cache_ram": 0}
    )
    result = cell_run.run_cell(inputs)
    assert result["status"] == "done", result.get("reason")
    assert len(benches) == 2 and benches[0] < benches[1]  # two benches, then a quiet one kept
    assert result["interference"]["flagged"] is False and not mu.disturbed(result)
    (first,) = result[mu.DISTURBED_ATTEMPTS]
    assert first["attempt"] == 1 and first["interference"]["flagged"] is True
    assert first["completed"] == 4
    on_disk = json.loads((tmp_path / "cell" / "metrics.json").read_text())
    assert on_disk[mu.DISTURBED_ATTEMPTS] == result[mu.DISTURBED_ATTEMPTS]
    # requests.jsonl is the kept attempt's: 4 measured requests (and its warm-up), not 8
    lines = (tmp_path / "cell" / "requests.jsonl").read_text().splitlines()
    measured = [r for r in map(json.loads, lines) if not r.get("warmup")]
    assert len(measured) == 4
    assert left_behind(str(SERVER)) == []


@pytest.mark.standin
def test_a_server_that_caches_prompts_is_not_asked_for_a_second_attempt(tmp_path, monkeypatch):
    """Its prefix cache would serve the first attempt's prompts to the second (TTFT of cache
    hits): the disturbed attempt is kept, reported disturbed, and the metrics say why."""
    inputs, benches = law_cell_disturbed_once(tmp_path, monkeypatch, {})
    result = cell_run.run_cell(inputs)
    assert result["status"] == "done", result.get("reason")
    assert len(benches) == 1 and mu.disturbed(result) is True
    assert mu.DISTURBED_ATTEMPTS not in result
    assert "prefix cache is on" in result[mu.RERUN_SKIPPED]
    assert "prefix cache is on" in mu.attempts_note(result)
    assert left_behind(str(SERVER)) == []
