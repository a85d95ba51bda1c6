"""The one way a server is run: a port held for it, the command made for that port, the process
started and waited on until it answers (failing as soon as it dies), then stopped and the port
freed. A cell's run, the context guard's counting server and an engine's smoke test all start
theirs here.

    with ServerLaunch.reserve(command_for, log_path, host) as launch:
        launch.start()
        launch.wait_ready(health_path, timeout_s)
        ...  # the server answers at launch.base_url

The steps stay apart so a cell's run can record the command and arm its memory watchdog on the
process before it starts, and follow the server's memory from its first second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from .ports import PortLease, reserve_port
from .server import ServerProcess, wait_ready


class Command(Protocol):
    """What starting a server needs of its command (engines.command.ServerCommand is one)."""

    @property
    def argv(self) -> list[str]: ...
    @property
    def env(self) -> dict[str, str]: ...
    @property
    def stop_argv(self) -> list[str] | None: ...
    @property
    def alive_argv(self) -> list[str] | None: ...
    @property
    def follow_argv(self) -> list[str] | None: ...
    @property
    def base_url(self) -> str: ...


C = TypeVar("C", bound=Command)


@dataclass
class ServerLaunch(Generic[C]):
    """One server from its port to its teardown. Leaving the `with` stops the process (also
    when it never started) and frees the port."""

    command: C
    server: ServerProcess
    lease: PortLease

    @classmethod
    def reserve(
        cls,
        command_for: Callable[[int], C],
        log_path: str | Path,
        host: str = "127.0.0.1",
        preferred_port: int | None = None,
        record_path: Path | None = None,
    ) -> ServerLaunch[C]:
        """Hold a port (`preferred_port` when free) and make the command for it; nothing runs
        yet. `record_path`: where what it starts is on record (ServerProcess)."""
        lease = reserve_port(host, preferred_port)
        try:
            command = command_for(lease.port)
        except BaseException:
            lease.release()
            raise
        server = ServerProcess.for_command(command, Path(log_path), record_path)
        return cls(command, server, lease)

    @property
    def base_url(self) -> str:
        return self.command.base_url

    def start(self) -> None:
        self.server.start()

    def wait_ready(
        self, health_path: str, timeout_s: float, probe_body: dict | None = None
    ) -> float:
        """Seconds until `health_path` answered (and the probe completed, if given); raises
        ServerError as soon as the process dies, or at the timeout."""
        return wait_ready(self.server, self.command.base_url, health_path, timeout_s, probe_body)

    def __enter__(self) -> ServerLaunch[C]:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.server.stop()
        finally:
            self.lease.release()
