"""The GPU check's matrix (configs/h200-check.yaml) is a sweep that one device call runs whole:
concurrency 1 to 128, the drafter none and self, the base series' floor; the plan accepts it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "h200-check.yaml"


def test_the_plan_lists_the_sweep_for_both_drafters_and_the_floor():
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts.plan", "--configfile", str(CONFIG)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    cells = re.findall(r"^# cell (\S+)$", proc.stdout, re.M)
    points = [1, 2, 4, 8, 16, 32, 64, 128]
    series = "llama-1b-shape__llamacpp-cuda__f16__{}__sweep-c{}{}"
    expected = {series.format(d, c, "") for d in ("none", "self") for c in points}
    expected |= {series.format("none", c, "__floor") for c in points}
    assert expected <= set(cells)
    assert "llama-1b-shape__llamacpp-cuda-seeds-split__f16__none__sharegpt-c32" in cells
    assert len(cells) == len(expected) + 1
    # one server start per series, sized for its heaviest point
    assert "-c 524288 --parallel 128" in proc.stdout
