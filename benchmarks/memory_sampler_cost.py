"""CPU cost of the memory sampler: % of one core it uses at a given interval while watching a
real process tree (a parent with children), nothing else running in this process.

    python benchmarks/memory_sampler_cost.py --interval-s 0.1 --seconds 20
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

from workflow_scripts.process.memory import MemorySampler

TREE = (
    "import subprocess, sys, time\n"
    "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])"
    " for _ in range(4)]\n"
    "time.sleep(600)\n"
)


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--interval-s", type=float, default=0.1)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    tree = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    try:
        time.sleep(1.0)
        sampler = MemorySampler(interval_s=args.interval_s)
        sampler.server_pid = tree.pid
        before, start = cpu_s(), time.monotonic()
        sampler.start()
        time.sleep(args.seconds)
        sampler.stop()
        used, wall = cpu_s() - before, time.monotonic() - start
    finally:
        import os
        import signal

        os.killpg(tree.pid, signal.SIGKILL)
        tree.wait()
    print(
        f"| interval_s | samples | wall_s | cpu_s | % of one core |\n|---|---|---|---|---|\n"
        f"| {args.interval_s} | {len(sampler.samples)} | {wall:.1f} | {used:.3f} | "
        f"{100 * used / wall:.2f} |"
    )


if __name__ == "__main__":
    main()
