"""NVIDIA GPUs through NVML (nvidia-ml-py's `pynvml`, when importable): the total-energy counter
(`nvmlDeviceGetTotalEnergyConsumption`, mJ since the driver loaded, Volta and later) and the
power reading (`nvmlDeviceGetPowerUsage`, mW), of the devices the server uses.

A read of the counters is timed by NVML's own timestamp of the first device's value (the
field-values call, `NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION`: CPU time in µs since 1970), so a
window's edges are the instants the values are of; where NVML gives no timestamp (an older
driver, a field it does not serve, one off this machine's clock by more than
`MAX_STAMP_SKEW_S`), by the clock read right before the counters.

Which devices: the server's `CUDA_VISIBLE_DEVICES` (indices or GPU UUIDs, a UUID's unique
prefix allowed), else all. An index means NVML's order, which is CUDA's only under
`CUDA_DEVICE_ORDER=PCI_BUS_ID` (say UUIDs to be sure); a MIG instance is refused (the counter
is the whole board's). Method: `counter` when every used device has the counter; else `power
samples` when every one gives power readings (the sampler's, integrated); else not readable.
The figure is board energy: a lower bound on the machine's (CPU, host memory, fans and power
supply are not in it).
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from .counters import Accumulator, CounterRead
from .source import COUNTER, NVML, POWER_SAMPLES, SourceInfo, SourceUnavailable

MODULE = "pynvml"
UNIT_J = 1e-3  # the counter counts millijoules
MW_PER_W = 1000.0
NOT_SUPPORTED_CODE = 3  # NVML_ERROR_NOT_SUPPORTED
ENERGY_FIELD = 83  # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: the same counter, with a timestamp
US_PER_S = 1e6
MAX_STAMP_SKEW_S = 5.0  # an NVML timestamp further than this from the clock is not trusted
STAMPED_NOTE = "each counter read is timed by NVML's own timestamp of the value"
SCOPE = (
    "board energy of the GPUs the server uses (NVML): a lower bound on the machine's, which "
    "also draws for its CPUs, host memory, fans and power supply"
)


def visible_entries(value: str | None) -> list[str] | None:
    """`CUDA_VISIBLE_DEVICES` split into its entries; None when unset (every device)."""
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def select_devices(entries: list[str] | None, uuids: Sequence[str]) -> list[int]:
    """NVML indices of the devices `entries` name (None: all); a name that matches nothing, or
    more than one device, or a MIG instance, is refused with the reason."""
    if entries is None:
        return list(range(len(uuids)))
    if not entries or entries[0] == "-1":
        raise SourceUnavailable("CUDA_VISIBLE_DEVICES hides every GPU: the server uses none")
    chosen: list[int] = []
    for entry in entries:
        if entry.startswith("MIG-"):
            raise SourceUnavailable(
                f"CUDA_VISIBLE_DEVICES names a MIG instance ({entry}): NVML's energy counter "
                "is the whole board's, not the instance's"
            )
        if entry.isdigit():
            found = [int(entry)] if int(entry) < len(uuids) else []
        else:
            found = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
        if len(found) != 1:
            what = "no device" if not found else f"{len(found)} devices"
            raise SourceUnavailable(
                f"CUDA_VISIBLE_DEVICES entry {entry!r} matches {what} of the {len(uuids)} NVML sees"
            )
        if found[0] not in chosen:
            chosen.append(found[0])
    return chosen


def not_supported(nvml: Any, exc: BaseException) -> bool:
    """Whether an NVML error says "not supported" (this device has no such reading)."""
    kind = getattr(nvml, "NVMLError_NotSupported", None)
    if isinstance(kind, type) and isinstance(exc, kind):
        return True
    code = getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", NOT_SUPPORTED_CODE)
    return getattr(exc, "value", None) == code


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def import_nvml() -> Any:
    try:
        return importlib.import_module(MODULE)
    except ImportError as exc:
        raise SourceUnavailable(
            f"no {MODULE} module (nvidia-ml-py is not installed): {exc}"
        ) from None


class NvmlSource:
    """The used devices opened through NVML; see the module's docstring."""

    def __init__(
        self,
        visible_devices: str | None = None,
        clock: Callable[[], float] = time.time,
        module: Any = None,
    ) -> None:
        self.nvml = module if module is not None else import_nvml()
        self.clock = clock
        try:
            self.nvml.nvmlInit()
            count = self.nvml.nvmlDeviceGetCount()
            every = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            uuids = [_text(self.nvml.nvmlDeviceGetUUID(h)) for h in every]
        except Exception as exc:  # no driver, no library, a broken device: no figure
            raise SourceUnavailable(f"NVML did not start: {type(exc).__name__}: {exc}") from exc
        if not every:
            raise SourceUnavailable("NVML found no GPU")
        self.indices = select_devices(visible_entries(visible_devices), uuids)
        self.handles = [every[i] for i in self.indices]
        self.uuids = [uuids[i] for i in self.indices]
        self.names = [_text(self.nvml.nvmlDeviceGetName(h)) for h in self.handles]
        self.has_counter = [self._supports(self._counter_mj, h) for h in self.handles]
        self.has_power = [self._supports(self._power_mw, h) for h in self.handles]
        self.method = self._method()
        self.stamped = self.method == COUNTER and self._stamps_work()
        self._accumulator = Accumulator(UNIT_J, [None] * len(self.handles))

    def _counter_mj(self, handle: Any) -> int:
        return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle))

    def _stamped_mj(self, handle: Any) -> tuple[int, float] | None:
        """The counter through the field-values call, with NVML's timestamp of it (epoch s);
        None where the call, the field or the timestamp gives nothing usable."""
        field = getattr(self.nvml, "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", ENERGY_FIELD)
        try:
            (found,) = self.nvml.nvmlDeviceGetFieldValues(handle, [field])
            if found.nvmlReturn != 0 or found.timestamp <= 0:
                return None
            return int(found.value.ullVal), found.timestamp / US_PER_S
        except Exception:
            return None

    def _stamps_work(self) -> bool:
        """Whether every used device gives its counter with a timestamp on this machine's
        clock (within MAX_STAMP_SKEW_S)."""
        now = self.clock()
        found = [self._stamped_mj(h) for h in self.handles]
        return all(f is not None and abs(f[1] - now) <= MAX_STAMP_SKEW_S for f in found)

    def _power_mw(self, handle: Any) -> int:
        return int(self.nvml.nvmlDeviceGetPowerUsage(handle))

    def _supports(self, reading: Callable[[Any], int], handle: Any) -> bool:
        try:
            reading(handle)
        except Exception as exc:
            if not_supported(self.nvml, exc):
                return False
            raise SourceUnavailable(f"NVML read failed: {type(exc).__name__}: {exc}") from exc
        return True

    def _method(self) -> str:
        if all(self.has_counter):
            return COUNTER
        if all(self.has_power):
            return POWER_SAMPLES
        lacking = [
            u
            for u, c, p in zip(self.uuids, self.has_counter, self.has_power, strict=True)
            if not (c or p)
        ]
        raise SourceUnavailable(
            "NVML gives neither the energy counter nor power readings (not supported) on "
            + ", ".join(lacking)
        )

    def info(self) -> SourceInfo:
        devices = tuple(
            {"index": i, "uuid": u, "name": n, "energy_counter": c, "power_reading": p}
            for i, u, n, c, p in zip(
                self.indices, self.uuids, self.names, self.has_counter, self.has_power, strict=True
            )
        )
        notes: tuple[str, ...] = (STAMPED_NOTE,) if self.stamped else ()
        if self.method == POWER_SAMPLES:
            lacking = [u for u, c in zip(self.uuids, self.has_counter, strict=True) if not c]
            notes = (
                "NVML's total-energy counter is not supported on "
                + ", ".join(lacking)
                + ": joules integrated from power samples",
            )
        unit = UNIT_J if self.method == COUNTER else None
        return SourceInfo(
            NVML, self.method, devices, unit, (None,) * len(self.handles), SCOPE, notes
        )

    def read(self) -> CounterRead | None:
        """Every used device's counter, in mJ, timed by NVML's timestamp of the first device's
        value where it gives one (else by the clock right before the reads); None under
        `power samples`."""
        if self.method != COUNTER:
            return None
        t_s = self.clock()
        if self.stamped:
            found = [self._stamped_mj(h) for h in self.handles]
            if all(f is not None for f in found):
                stamp = found[0][1]
                t_s = stamp if abs(stamp - t_s) <= MAX_STAMP_SKEW_S else t_s
                return CounterRead(t_s, tuple(f[0] for f in found))
        return CounterRead(t_s, tuple(self._counter_mj(h) for h in self.handles))

    def power_w(self) -> float | None:
        """The used devices' power summed, W; None when one of them gives none."""
        if not all(self.has_power):
            return None
        try:
            return sum(self._power_mw(h) for h in self.handles) / MW_PER_W
        except Exception:
            return None

    def energy_j(self) -> float | None:
        """Joules since the first call (the counter's), for the sampler's series."""
        try:
            read = self.read()
        except Exception:
            return None
        return None if read is None else self._accumulator.add(read)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()
