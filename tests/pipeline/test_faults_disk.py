"""A disk that fills while a cell writes its results: a clear error, and no half-written file
that counts.

The real test mounts a small tmpfs where the cell's results go and lets the real pipeline fill it
(the running llama-server's log takes the last free pages, the results do not fit); it needs
`mount` (root with CAP_SYS_ADMIN) and is skipped, saying so, where that is refused. The
STAND-IN test needs nothing: a writer that raises ENOSPC part-way through a result file.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.pipeline import (
    planned_cells,
    run_snakemake,
    tiny_config,
    tiny_workload,
    write_config,
)
from workflow_scripts import atomic

CELL = "smollm2-135m__llamacpp-cpu__q4_1__none__tiny"
OUTPUTS = ("metrics.json", "requests.jsonl", "memory.csv", "server.log")
FREE_LEFT_BYTES = 8192  # two pages: less than the results need


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs at the cell's results folder, filled to FREE_LEFT_BYTES."""
    mountpoint = tmp_path / "results/cells" / CELL
    mountpoint.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({mounted.stderr.strip()}); "
            "the stand-in writer test covers the writes"
        )
    try:
        stat = os.statvfs(mountpoint)
        filler = mountpoint / ".filler"
        filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - FREE_LEFT_BYTES))
        yield mountpoint, filler
    finally:
        if subprocess.run(["umount", str(mountpoint)]).returncode != 0:
            subprocess.run(["umount", "-l", str(mountpoint)])


@pytest.mark.slow
def test_a_full_disk_fails_the_cell_loudly_and_keeps_nothing(tmp_path, small_disk):
    mountpoint, filler = small_disk
    write_config(
        tmp_path,
        tiny_config(
            [{"model": "smollm2-135m", "engine": "llamacpp-cpu", "workload": "tiny"}],
            workloads={"tiny": tiny_workload(max_tokens=32)},
        ),
    )
    proc = run_snakemake(tmp_path, f"results/cells/{CELL}/metrics.json")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "No space left on device" in output  # on the console: the traceback is re-raised
    log = (tmp_path / "logs/cells" / f"{CELL}.log").read_text()
    assert "OSError: [Errno 28] No space left on device" in log
    left = sorted(p.name for p in mountpoint.iterdir())
    assert left == [".filler"], left  # no result, no temp file: nothing half-written counts
    assert not (tmp_path / "results/failures" / f"{CELL}.count").exists()  # not a result either
    filler.unlink()  # space again: the next run redoes the cell
    assert planned_cells(tmp_path) == {CELL}


class _FillsUp:
    """STAND-IN for a file on a disk that fills: takes `room` bytes, then raises ENOSPC."""

    def __init__(self, handle, room: int):
        self._handle, self._room = handle, room

    def write(self, text: str) -> int:
        if len(text) > self._room:
            self._handle.write(text[: self._room])
            self._handle.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= len(text)
        return self._handle.write(text)

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)


@pytest.mark.standin
def test_a_result_write_cut_by_enospc_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    """Stand-in writer: the result file is written through a handle that runs out of space
    after 100 bytes. The error surfaces, the previous complete file is untouched, and the
    half-written temp file is gone."""
    target = tmp_path / "metrics.json"
    atomic.write_json(target, {"status": "done", "run": 1})
    before = target.read_bytes()
    real_fdopen = os.fdopen
    monkeypatch.setattr(
        atomic.os, "fdopen", lambda fd, *a, **k: _FillsUp(real_fdopen(fd, *a, **k), room=100)
    )
    with pytest.raises(OSError) as caught:
        atomic.write_json(target, {"status": "done", "run": 2, "records": ["x" * 50] * 20})
    assert caught.value.errno == errno.ENOSPC
    assert target.read_bytes() == before
    assert json.loads(before)["run"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]
    monkeypatch.undo()
    assert Path(target).read_bytes() == before
