"""The queue a series' points take turns in (cell.series), with real file locks: lighter points
first, one at a time, and a server job that finds no point ends by itself."""

from __future__ import annotations

import threading
import time

from tests.support.sweeps import point_cell
from workflow_scripts.cell import series


def record(start_id: str = "s@1") -> dict:
    return {"start_id": start_id, "ready_at": 0.0}


def test_a_heavier_point_waits_for_a_lighter_one_still_queued(tmp_path):
    light, heavy = point_cell(False, 1), point_cell(False, 4)
    order: list[str] = []
    with series.registered(tmp_path, light):
        assert series.queued_points(tmp_path, light.sweep.series) == 1

        def heavy_point():
            with series.registered(tmp_path, heavy), series.turn(tmp_path, heavy, record()) as t:
                order.append(f"heavy {t.position}")

        thread = threading.Thread(target=heavy_point)
        thread.start()
        time.sleep(1.0)
        assert order == []  # the lighter point is still queued: the heavier one waits
        with series.turn(tmp_path, light, record()) as t:
            order.append(f"light {t.position}")
    thread.join(timeout=10)
    assert order == ["light 1", "heavy 2"]
    assert series.queued_points(tmp_path, light.sweep.series) == 0


def test_positions_count_from_one_on_each_server_start(tmp_path):
    point = point_cell(False, 2)
    with series.registered(tmp_path, point), series.turn(tmp_path, point, record("a")) as t:
        assert t.position == 1
    with series.registered(tmp_path, point), series.turn(tmp_path, point, record("b")) as t:
        assert t.position == 1  # a new start counts anew


def test_a_server_job_with_no_point_gives_up(tmp_path):
    point = point_cell(False, 2)
    start = time.monotonic()
    assert not series.wait_for_a_point(tmp_path, point.sweep.series, timeout_s=0.5)
    assert time.monotonic() - start >= 0.5
    with series.registered(tmp_path, point):
        assert series.wait_for_a_point(tmp_path, point.sweep.series, timeout_s=0.5)
