"""A real single-node Slurm on localhost for tests: munged, slurmctld and slurmd from Debian's
`munge` and `slurm-wlm`, with every key, socket, state and log file in one temp dir.

No accounting (no slurmdbd): job state comes from slurmctld, which keeps finished jobs for
MinJobAge seconds, long enough for the executor plugin's `squeue` status checks.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "sinfo", "srun", "scancel")
PARTITION = "debug"
NODE = "localhost"
MIN_JOB_AGE_S = 300


def _find(name: str) -> str | None:
    """On PATH, or in the sbin folders a non-login root shell may lack."""
    return shutil.which(
        name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    )


def missing_binaries() -> list[str]:
    """Slurm and munge programs the cluster needs that are not installed."""
    return [name for name in DAEMONS + CLIENTS if _find(name) is None]


def _program(name: str) -> str:
    found = _find(name)
    if found is None:
        raise FileNotFoundError(name)
    return found


def _free_ports(count: int) -> list[int]:
    """Ports the kernel hands out now, held open together so they differ."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def node_hardware() -> str:
    """This machine as slurmd sees it (CPUs, sockets, cores, threads, RealMemory), so the node
    is not drained for claiming more than it has."""
    out = subprocess.run(
        [_program("slurmd"), "-C"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    first = out.splitlines()[0].split()
    keep = (
        "CPUs=",
        "Boards=",
        "SocketsPerBoard=",
        "CoresPerSocket=",
        "ThreadsPerCore=",
        "RealMemory=",
    )
    return " ".join(part for part in first if part.startswith(keep))


def slurm_conf(
    root: Path, munge_socket: Path, ctld_port: int, slurmd_port: int, hardware: str
) -> str:
    user = getpass.getuser()
    return f"""\
ClusterName=llmbench-test
SlurmctldHost={NODE}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge={MIN_JOB_AGE_S}
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={NODE} NodeAddr=127.0.0.1 {hardware} State=UNKNOWN
PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class SlurmCluster:
    """Handles to the running daemons and the environment that points clients at them."""

    root: Path
    env: dict[str, str]
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)

    def run(self, *argv: str, check: bool = True) -> str:
        proc = subprocess.run(
            [_program(argv[0]), *argv[1:]], env=self.env, capture_output=True, text=True, timeout=30
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}\n{self.logs()}")
        return proc.stdout

    def node_state(self) -> str:
        return self.run("sinfo", "-h", "-n", NODE, "-o", "%T", check=False).strip()

    def jobs(self) -> list[dict[str, str]]:
        """Every job slurmctld still knows (running and finished within MinJobAge), as
        `scontrol show job` key=value records."""
        out = self.run("scontrol", "-o", "show", "job", check=False)
        records = []
        for line in out.splitlines():
            if not line.startswith("JobId="):
                continue
            record = {}
            for part in line.split():
                key, _, value = part.partition("=")
                record[key] = value
            records.append(record)
        return records

    def job(self, job_id: str) -> dict[str, str]:
        return next((job for job in self.jobs() if job["JobId"] == job_id), {})

    def logs(self, tail: int = 40) -> str:
        parts = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log"):
            path = self.root / name
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()[-tail:]
                parts.append(f"--- {name}\n" + "\n".join(lines))
        return "\n".join(parts)


def _start(cluster: SlurmCluster, name: str, argv: list[str]) -> None:
    log = open(cluster.root / f"{name}.out", "w")  # noqa: SIM115  (closed with the process)
    cluster.daemons[name] = subprocess.Popen(
        argv, env=cluster.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()


def _wait(cluster: SlurmCluster, what: str, ready, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name, proc in cluster.daemons.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}\n{cluster.logs()}")
        if ready():
            return
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}\n{cluster.logs()}")


def _stop(cluster: SlurmCluster) -> None:
    """Cancel what is still queued or running (slurmstepd ends each job's processes), end the
    daemons we started, then anything of this cluster that outlived them."""
    if "slurmctld" in cluster.daemons and cluster.daemons["slurmctld"].poll() is None:
        try:
            cluster.run("scancel", "--user", getpass.getuser(), check=False)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and any(
                job.get("JobState") in ("RUNNING", "PENDING", "COMPLETING")
                for job in cluster.jobs()
            ):
                time.sleep(0.5)
        except (subprocess.SubprocessError, OSError):
            pass
    for name in ("slurmd", "slurmctld", "munged"):
        proc = cluster.daemons.get(name)
        if proc is None or proc.poll() is not None:
            continue
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    _kill_leftovers(cluster)


def _ours(proc: psutil.Process, cluster: SlurmCluster) -> bool:
    """A job's processes carry this cluster's SLURM_CONF; its slurmstepd (which rewrites its
    environment) holds this cluster's slurmd.log open."""
    if proc.environ().get("SLURM_CONF") == cluster.env["SLURM_CONF"]:
        return True
    return proc.name().startswith("slurmstepd") and any(
        Path(f.path).is_relative_to(cluster.root) for f in proc.open_files()
    )


def _kill_leftovers(cluster: SlurmCluster) -> None:
    """Job steps that outlived the daemons (slurmctld gone before scancel could reach them):
    slurmstepd and whatever the jobs started, llama-server included."""
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    leftovers = []
    for proc in psutil.process_iter():
        try:
            if proc.pid not in mine and _ours(proc, cluster):
                leftovers.append(proc)
        except psutil.Error:
            continue
    for proc in leftovers:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(leftovers, timeout=5)


def _srun_keeping_conf(root: Path, conf: Path) -> Path:
    """A folder whose `srun` is the real one with SLURM_CONF set again.

    Inside a job, snakemake-executor-plugin-slurm-jobstep (0.6.1) drops every SLURM_* variable
    before its `srun`, SLURM_CONF too, so srun finds a cluster only through /etc/slurm/slurm.conf
    or a configless slurmd's /run/slurm/conf. This cluster lives in a temp dir and leaves both
    alone (another Slurm on the machine may own them)."""
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "srun"
    shim.write_text(f'#!/bin/sh\nSLURM_CONF="{conf}" exec "{_program("srun")}" "$@"\n')
    shim.chmod(0o755)
    return bin_dir


@contextmanager
def single_node_slurm(root: Path) -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and slurmd under `root`; stop them however the block ends."""
    root = Path(root)
    for sub in ("munge", "state", "spool"):
        (root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_socket = root / "munge" / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, munge_socket, *_free_ports(2), node_hardware()))
    env = {
        **os.environ,
        "SLURM_CONF": str(conf),
        "PATH": f"{_srun_keeping_conf(root, conf)}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("SLURM_JOB_ID", None)
    cluster = SlurmCluster(root=root, env=env)
    try:
        _start(
            cluster,
            "munged",
            [
                _program("munged"),
                "--foreground",
                "--force",
                f"--socket={munge_socket}",
                f"--key-file={key}",
                f"--pid-file={root}/munge/munged.pid",
                f"--log-file={root}/munged.log",
                f"--seed-file={root}/munge/munged.seed",
            ],
        )
        _wait(cluster, "munged", munge_socket.exists)
        _start(cluster, "slurmctld", [_program("slurmctld"), "-D", "-i", "-f", str(conf)])
        _wait(
            cluster,
            "slurmctld",
            lambda: cluster.run("scontrol", "ping", check=False).count("UP") > 0,
        )
        _start(cluster, "slurmd", [_program("slurmd"), "-D", "-N", NODE, "-f", str(conf)])
        _wait(cluster, "the node to be idle", lambda: cluster.node_state() == "idle")
        yield cluster
    finally:
        _stop(cluster)
