"""Pins the Snakemake behaviour the series' server job relies on that is not Snakemake's
documented interface: where it keeps a job's provenance (`.snakemake/metadata/<key>`, the key
the output path in URL-safe base64), and that without that file a changed param gives the job no
reason to run (workflow_scripts.cell.series.forget_provenance). Measured on Snakemake 9.27.1;
pyproject.toml allows `>=9.27,<10`. On a Snakemake where this no longer holds, this test names
the version, and a series would again plan no new point once its server job had a reason."""

from __future__ import annotations

import subprocess
import sys
from base64 import urlsafe_b64encode
from importlib.metadata import version

from workflow_scripts.cell.series import forget_provenance

SNAKEFILE = """
rule out:
    output:
        "res/out.txt",
    params:
        value=config.get("value", 1),
    shell:
        "echo {params.value} > {output}"
"""


def snakemake(workdir, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_provenance_lives_where_forget_provenance_removes_it(tmp_path):
    running = f"Snakemake {version('snakemake')}"
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    snakemake(tmp_path)
    key = urlsafe_b64encode(b"res/out.txt").decode()
    metadata = tmp_path / ".snakemake" / "metadata" / key
    assert metadata.is_file(), (
        f"{running} keeps no provenance at .snakemake/metadata/<base64 of the output path>: "
        "forget_provenance (workflow_scripts/cell/series.py) must follow its new layout"
    )
    assert "Params have changed" in snakemake(tmp_path, "-n", "--config", "value=2"), running

    forget_provenance(tmp_path, ["res/out.txt"])

    assert not metadata.exists()
    planned = snakemake(tmp_path, "-n", "--config", "value=2")
    assert "Nothing to be done" in planned, (
        f"{running}: with its provenance removed, a changed param still reruns the job; "
        f"a series' server job would then have a reason of its own to run:\n{planned}"
    )


def test_the_scheduler_handler_that_sigterm_wraps_is_where_the_wrap_expects_it():
    """workflow_scripts.cell.interrupt.sigterm_never_waits_on_itself wraps Snakemake's private
    `JobScheduler.exit_gracefully` and does nothing where it is not found: then SIGTERM during a
    large run's planning waits for ever again (a 1000-point `snakemake -n` hung)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from workflow_scripts.cell.interrupt import sigterm_never_waits_on_itself as wrap; "
            "print(wrap())",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "True", (
        f"Snakemake {version('snakemake')} has no JobScheduler.exit_gracefully where "
        f"workflow_scripts/cell/interrupt.py looks for it: {proc.stdout}{proc.stderr}"
    )
