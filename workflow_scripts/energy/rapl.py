"""CPUs through RAPL, as Linux's powercap exposes it: each package zone (`intel-rapl:<n>`, named
`package-<n>`; AMD Zen's counters appear under the same `intel-rapl` control type on recent
kernels) and, where present, its `dram` subzone (`intel-rapl:<n>:<m>` named `dram`): their
`energy_uj` and `max_energy_range_uj`. The `core`, `uncore` and `psys` zones are left out (the
first two lie inside the package, the last is the platform's), and so are the
`intel-rapl-mmio` zones (a second view of the same package).

The folder is `LLMBENCH_POWERCAP_ROOT`, else /sys/class/powercap (tests point it at a stand-in
tree). `energy_uj` is readable by root only on most kernels since 2020, and most VMs have no
powercap folder at all. A package counter covers the whole socket: the load client's work is in
it beside the server's (the record gives the client's share of the CPU time).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .counters import Accumulator, CounterRead
from .source import COUNTER, RAPL, SourceInfo, SourceUnavailable

ROOT_ENV = "LLMBENCH_POWERCAP_ROOT"
DEFAULT_ROOT = "/sys/class/powercap"
UNIT_J = 1e-6  # energy_uj counts microjoules
ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")
SCOPE = (
    "RAPL package (and DRAM) energy of the CPU sockets (powercap): each package counter covers "
    "the whole socket, the load client's work included, and none of the rest of the machine "
    "(GPUs, disks, fans, power supply)"
)


@dataclass(frozen=True)
class RaplDomain:
    """One counter: its zone folder (`intel-rapl:0:1`), its `name` (`package-0`, `dram`), its
    kind (`package` or `dram`), the package it belongs to, and its range in µJ."""

    zone: str
    name: str
    kind: str
    package: int
    range_uj: int

    def to_dict(self) -> dict[str, object]:
        return {"zone": self.zone, "name": self.name, "kind": self.kind, "package": self.package}


def powercap_root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


def read_text(path: Path) -> str:
    """One sysfs file's content (one line)."""
    with open(path) as handle:
        return handle.read().strip()


def _read_int(path: Path) -> int:
    try:
        return int(read_text(path))
    except PermissionError as exc:
        raise SourceUnavailable(f"permission denied on {path} (readable by root only)") from exc
    except (OSError, ValueError) as exc:
        raise SourceUnavailable(f"{path} unreadable: {type(exc).__name__}: {exc}") from exc


def _kind(name: str, sub: str | None) -> str | None:
    if sub is None and name.startswith("package"):
        return "package"
    if sub is not None and name == "dram":
        return "dram"
    return None


def find_domains(root: Path) -> list[RaplDomain]:
    """The package and dram zones under `root`, packages in order, each one's dram after it."""
    if not root.is_dir():
        raise SourceUnavailable(f"no powercap folder ({root}): no RAPL here (a VM?)")
    found = []
    for zone in root.iterdir():
        match = ZONE.match(zone.name)
        if not match:
            continue
        try:
            name = read_text(zone / "name")
        except OSError as exc:
            raise SourceUnavailable(f"{zone / 'name'} unreadable: {exc}") from exc
        kind = _kind(name, match.group(2))
        if kind is None:
            continue
        range_uj = _read_int(zone / "max_energy_range_uj")
        found.append(RaplDomain(zone.name, name, kind, int(match.group(1)), range_uj))
    if not found:
        raise SourceUnavailable(f"no RAPL package zone under {root}")
    return sorted(found, key=lambda d: (d.package, d.kind != "package", d.zone))


class RaplSource:
    """The package and dram counters of every socket (the server's threads may run on any)."""

    def __init__(self, root: Path | None = None, clock: Callable[[], float] = time.time) -> None:
        self.root = root if root is not None else powercap_root()
        self.clock = clock
        self.domains = find_domains(self.root)
        self.read()  # unreadable counters are found now, not mid-run
        self._accumulator = Accumulator(UNIT_J, [d.range_uj for d in self.domains])

    def info(self) -> SourceInfo:
        ranges = tuple(d.range_uj for d in self.domains)
        notes = ("the load client's CPU work is inside the package counter",)
        return SourceInfo(
            RAPL, COUNTER, tuple(d.to_dict() for d in self.domains), UNIT_J, ranges, SCOPE, notes
        )

    def read(self) -> CounterRead:
        t_s = self.clock()
        return CounterRead(
            t_s, tuple(_read_int(self.root / d.zone / "energy_uj") for d in self.domains)
        )

    def power_w(self) -> float | None:
        return None  # RAPL has counters only; its power is their slope

    def energy_j(self) -> float | None:
        try:
            return self._accumulator.add(self.read())
        except SourceUnavailable:
            return None

    def close(self) -> None:
        pass
